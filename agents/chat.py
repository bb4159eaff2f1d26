"""An episode as one conversation, token in and token out (`--context chat`).

The first prompt is the system message and the first observation as a user turn, rendered by the
model's chat template. After each reply the conversation grows by exactly three pieces, and nothing
before them is ever re-tokenized:

    ids(t + 1) = ids(t) + reply ids (as sampled) + closing + next observation turn

where `closing` is what the template writes after an assistant message's content (ChatML:
`<|im_end|>\\n`, less the <|im_end|> the reply already ended on) and the observation turn is the
template's delta for one more message: a user turn, or under `--action-format tool_call` a tool result
in the template's tool role. Both are found by rendering a fixed probe conversation with and without
the new message, so they are the template's own text; the reply's ids are the ones the policy sampled,
so the learner scores exactly the tokens it generated from.

That holds only for a template that appends: rendering one more message must leave the text before
it unchanged. Qwen3's template drops the `<think>` blocks of earlier assistant turns, so the text the
model generated from would not be the text it is trained on; `ChatFormat` checks this when it is built
and refuses such a template in one line (`--context window` rebuilds every prompt and has no such
problem).
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.prompt import PromptBuilder
from agents.templates import ASSISTANT, rewrites_history

USER_PROBE, REPLY_PROBE, TURN_PROBE = "CHAT_PROBE_USER", "CHAT_PROBE_REPLY", "CHAT_PROBE_TURN"


class ChatFormat:
    """The token-level shape of one run's conversations: the first prompt and each turn's delta.

    `observation_role`: "user", or "tool" (tool results, --action-format tool_call). `tools`: the list the
    template renders through `tools=` (None: the tools, if any, are text in the system message)."""

    def __init__(self, tokenizer, prompts: PromptBuilder, observation_role: str = "user",
                 tools: list[dict] | None = None) -> None:  # fmt: skip
        self.tokenizer, self.prompts, self.role = tokenizer, prompts, observation_role
        self.kwargs = {"tools": tools} if tools is not None else {}
        eos = tokenizer.eos_token_id
        self.eos_text = tokenizer.decode([eos]) if eos is not None else None
        self._check()
        # the probe conversation each delta is rendered after, its text, and the closing of its reply
        self._history = [{"role": "system", "content": "CHAT_PROBE_SYSTEM"}, {"role": "user", "content": USER_PROBE},
                         {"role": "assistant", "content": REPLY_PROBE}]  # fmt: skip
        before = self._render(self._history, False)
        self._answered = before, before[before.rindex(REPLY_PROBE) + len(REPLY_PROBE) :]

    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                                  **self.kwargs)  # fmt: skip

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _check(self) -> None:
        """The template appends: the reply follows its generation prompt, and one more message leaves the
        conversation before it as it was (with a Qwen3-style reasoning reply, which some templates drop)."""
        system = {"role": "system", "content": "CHAT_PROBE_SYSTEM"}
        user = {"role": "user", "content": USER_PROBE}
        prompt = self._render([system, user], True)
        answered = self._render([system, user, {"role": "assistant", "content": ASSISTANT}], False)
        if not answered.startswith(prompt + ASSISTANT):
            raise ValueError("--context chat: the chat template does not put a reply right after its generation "
                             "prompt, so a conversation's tokens would not be the ones sampled; use --context window")  # fmt: skip
        more = self._render([system, user, {"role": "assistant", "content": ASSISTANT},
                             {"role": self.role, "content": TURN_PROBE}], True)  # fmt: skip
        if not more.startswith(answered):
            change = rewrites_history(self.tokenizer) or "rewrites"
            raise ValueError(f"--context chat: the chat template {change} earlier assistant turns when a turn is "
                             "added, so the tokens a reply was sampled from are not the ones it would be trained "
                             "on; use --context window (it rebuilds every prompt)")  # fmt: skip

    def first(self, task: str, observation: str, admissible: Sequence[str] | None) -> list[int]:
        """The first prompt: the system message and the first observation, with the generation prompt."""
        return self._encode(self._render(self.messages(task, observation, admissible), True))

    def messages(self, task: str, observation: str, admissible: Sequence[str] | None) -> list[dict]:
        native = bool(self.kwargs)
        return self.prompts.messages(task, [], observation, admissible, native, episode=True)

    def follow(self, ids: list[int], reply: list[int], step: int, observation: str,
               admissible: Sequence[str] | None) -> list[int]:  # fmt: skip
        """The conversation after `reply` (sampled from `ids`) and the observation of step `step` (1-based)."""
        return ids + reply + self.delta(reply, self.prompts.turn(step, observation, admissible))

    def delta(self, reply: list[int], content: str) -> list[int]:
        """What follows a reply: the rest of the template's closing of the assistant turn (less the EOS the
        reply ended on), then one more `observation_role` message and the generation prompt."""
        before, closing = self._answered
        after = self._render([*self._history, {"role": self.role, "content": content}], True)
        if reply and reply[-1] == self.tokenizer.eos_token_id and self.eos_text and closing.startswith(self.eos_text):
            closing = closing[len(self.eos_text) :]  # the reply stopped on it: it is already in the ids
        return self._encode(closing + after[len(before) :])
