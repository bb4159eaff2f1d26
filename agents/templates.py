"""What a checkpoint's chat template does that matters for this trainer, found by rendering probes.

A chat template is a small program shipped with the tokenizer, and real ones do more than wrap
roles in markers: Qwen3's strips `<think>` blocks from earlier assistant turns, Llama-3.2's writes
today's date into the system message, Qwen2.5's adds "You are Qwen, ..." when no system message
is given, Qwen3's has an `enable_thinking` switch. Each of these changes what the policy sees or
what it should write, so `template_notes` reports them as one-line notes for the user.

The checks render probe conversations through `tokenizer.apply_chat_template` and compare the
text; they never look at the model's name, so a fine-tune or a renamed copy is judged by what its
template does. A template that rejects a probe (say, a strict role order) yields no note for it.

    from agents.templates import template_notes
    for note in template_notes(tokenizer):
        print("note:", note)
"""

from __future__ import annotations

import datetime

SYSTEM, USER, LATER_USER = "PROBE_SYSTEM", "PROBE_USER", "PROBE_LATER_USER"
REASONING, ANSWER = "PROBE_A", "PROBE_B"
ASSISTANT = f"<think>\n{REASONING}\n</think>\n\n{ANSWER}"  # a Qwen3-style reply with its thinking
PINNED_DATE = "01 Jan 2001"  # every probe but the date check pins a template's date_string
DATE_FORMATS = ("%d %b %Y", "%d %B %Y", "%Y-%m-%d", "%B %d, %Y")  # how templates write today's date


def _msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


PROMPT = [_msg("system", SYSTEM), _msg("user", USER)]  # the shape of every prompt the trainer builds


def _render(tokenizer, messages, add_generation_prompt: bool = True, pin_date: bool = True, **kwargs) -> str | None:
    """The template's text for `messages`; None when the template refuses them. Extra keyword
    arguments are template variables (date_string, enable_thinking); templates ignore unknown ones."""
    if pin_date:
        kwargs.setdefault("date_string", PINNED_DATE)
    try:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )
    except Exception:  # jinja raise_exception, a missing variable: the probe tells us nothing
        return None


def rewrites_history(tokenizer) -> str | None:
    """How the template changes an earlier assistant turn: 'drops the <think> reasoning of',
    'drops' or 'rewrites'; None when the turn is rendered as given."""
    text = _render(tokenizer, [*PROMPT, _msg("assistant", ASSISTANT), _msg("user", LATER_USER)])
    if text is None or ASSISTANT in text:
        return None
    if ANSWER in text and REASONING not in text:
        return "drops the <think> reasoning of"
    return "drops" if ANSWER not in text else "rewrites"


def injects_date(tokenizer) -> bool:
    """The rendered prompt depends on the date: a `date_string` variable, or today's date itself
    (Llama-3's strftime_now) in the text."""
    first = _render(tokenizer, PROMPT, date_string="01 Jan 2001")
    second = _render(tokenizer, PROMPT, date_string="02 Feb 2002")
    if first != second:
        return True
    plain = _render(tokenizer, PROMPT, pin_date=False) or ""  # the template's own date, if it has one
    today = datetime.date.today()
    return any(today.strftime(fmt) in plain for fmt in DATE_FORMATS)


def default_system(tokenizer) -> str | None:
    """The system message the template inserts when none is given, or None. Found as the text
    that takes the place of the probe's system content when that message is left out."""
    with_system = _render(tokenizer, PROMPT, add_generation_prompt=False)
    without = _render(tokenizer, [_msg("user", USER)], add_generation_prompt=False)
    if with_system is None or without is None or SYSTEM not in with_system:
        return None
    before, after = with_system.split(SYSTEM, 1)
    after = after[: after.find(USER)] if USER in after else after  # up to the user's content
    prefix = without[: without.find(USER)] if USER in without else without
    if not (prefix.startswith(before) and prefix.endswith(after)):
        return None  # no system block at all without a system message (ChatML, Qwen3)
    inserted = prefix[len(before) : len(prefix) - len(after)].strip()
    return inserted if any(c.isalpha() for c in inserted) else None  # Llama-3: only its date header


def thinking(tokenizer) -> str | None:
    """'opens' when the generation prompt opens a <think> block, 'switch' when the template has an
    enable_thinking variable that changes the prompt, else None."""
    default = _render(tokenizer, PROMPT)
    without_prompt = _render(tokenizer, PROMPT, add_generation_prompt=False)
    if default is None:
        return None
    if without_prompt is not None and default.startswith(without_prompt):
        opened = default[len(without_prompt) :]
        if "<think>" in opened and "</think>" not in opened:
            return "opens"
    switched = [_render(tokenizer, PROMPT, enable_thinking=value) for value in (False, True)]
    return "switch" if any(text not in (None, default) for text in switched) else None


PROBE_TOOL = {"type": "function", "function": {"name": "probe_tool_q7", "description": "PROBE_TOOL_DOC",
              "parameters": {"type": "object", "properties": {}}}}  # fmt: skip


def renders_tools(tokenizer) -> bool:
    """Whether the template writes a `tools=` list into the prompt (Qwen2.5's does, plain ChatML
    ignores it): the probe tool's name appears in the text rendered with it and not without it."""
    with_tools = _render(tokenizer, PROMPT, tools=[PROBE_TOOL])
    without = _render(tokenizer, PROMPT)
    name = PROBE_TOOL["function"]["name"]
    return with_tools is not None and name in with_tools and name not in (without or "")


def template_notes(tokenizer) -> list[str]:
    """One-line notes on what `tokenizer.chat_template` does that matters for training; [] when
    nothing does (the tiny model's plain ChatML, for one)."""
    if _render(tokenizer, PROMPT) is None:
        return [
            "chat template: rejects a system + user conversation, the shape of every prompt this "
            "trainer builds (agents/prompt.py); pick a checkpoint whose template accepts a system message"
        ]
    notes = []
    change = rewrites_history(tokenizer)
    if change:
        # Harmless here, and the reason is worth saying: multi-turn trainers that render the whole
        # conversation train on a prompt the model never generated from.
        notes.append(
            f"chat template: {change} earlier assistant turns; no effect here: every step's prompt is rebuilt "
            "from the memory window as one system + one user message (agents/prompt.py, PromptBuilder.messages), "
            "so no assistant turn is ever rendered and the prompt trained on is exactly the prompt generated from"
        )
    if injects_date(tokenizer):
        notes.append(
            "chat template: writes today's date into the prompt (Llama-3's 'Today Date:'); prompts differ from "
            "day to day, so a run resumed, or a checkpoint evaluated, on another day sees slightly different "
            "prompts than it trained on"
        )
    system = default_system(tokenizer)
    if system:
        shown = system if len(system) <= 80 else system[:77] + "..."
        notes.append(
            f"chat template: inserts a default system message when none is given ({shown!r}); for "
            "information only: this trainer always gives one"
        )
    mode = thinking(tokenizer)
    if mode:
        how = ("the generation prompt opens a <think> block, so every response starts inside it"
               if mode == "opens" else
               "has an enable_thinking switch, rendered at its default (thinking on)")  # fmt: skip
        notes.append(
            f"chat template: {how}; responses may start with <think>...</think> reasoning before the <action> "
            "tag, so max_new_tokens must leave room for it: a response cut off while thinking has no action"
        )
    return notes
