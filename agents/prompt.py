"""Prompts: system instructions + a memory window of recent steps + the current view.

In the window context each env step is its own training sample, so the prompt is rebuilt
from scratch every step from the last `memory` (observation, action) pairs; its length stays
bounded however long the episode runs. In the chat context (agents/chat.py) the first two
messages open a conversation and `turn` writes each later observation. The chat template of the model's tokenizer turns the messages into
token ids, so a real instruct model sees its own format.

Templates (`template=`): "default" is terse, for the built-in grid games; "textworld"
reads like a text-adventure transcript (goal, step count, recent history, current
observation, admissible commands); "answer" is for single-turn problems (the question, and
the instruction to give the final answer in the action tag). An env names the template that suits it in
`metadata["prompt_template"]`; `--prompt-template` overrides it.

The reply format (`action_format`, agents/tools.py) fills the "as <action>command</action>" part
of each system message; with a tool format and a chat template that does not render `tools=`
(`native_tools=False`), the system message also lists the tools as JSON.
"""

from __future__ import annotations

from collections.abc import Sequence

from agents.tools import ActionFormat

TEMPLATES = ("default", "textworld", "answer")

SYSTEM = (
    "Task: {task}\n"
    "Reply with one command from the list as {how}; "
    "you may think first in <think></think>."
)

TEXTWORLD_SYSTEM = (
    "You are playing a text adventure game.\n"
    "Goal: {task}\n"
    "Each turn, reply with exactly one of the admissible commands as {how}; "
    "you may think first in <think></think>."
)

ANSWER_SYSTEM = (
    "{task}\n"
    "Reply with the final answer as {how}; you may think first in <think></think>."
)


class PromptBuilder:
    """Builds chat messages for one step of one env."""

    def __init__(
        self,
        memory: int = 2,
        show_admissible: bool = True,
        template: str = "default",
        action_format: ActionFormat | None = None,
    ) -> None:
        if memory < 0:
            raise ValueError("memory must be >= 0")
        if template not in TEMPLATES:
            raise ValueError(f"unknown prompt template {template!r}; choose one of: {', '.join(TEMPLATES)}")
        self.memory = memory
        self.show_admissible = show_admissible
        self.template = template
        self.action_format = action_format or ActionFormat()

    def messages(
        self,
        task: str,
        history: list[tuple[str, str]],
        observation: str,
        admissible: Sequence[str] | None,
        native_tools: bool = False,
        episode: bool = False,
    ) -> list[dict[str, str]]:
        """`native_tools`: the chat template gets the tools through `tools=`, so they are not written here.
        `episode`: the first messages of a conversation (--context chat, agents/chat.py): no memory window,
        and tools listed without the admissible commands of one step (each turn lists its own)."""
        recent = history[-self.memory :] if self.memory and not episode else []
        fmt = self.action_format
        if self.template == "textworld":
            system = TEXTWORLD_SYSTEM.format(task=task, how=fmt.how("command"))
        elif self.template == "answer":  # one question, one answer: no memory, no command list
            system = ANSWER_SYSTEM.format(task=task, how=fmt.how("answer"))
        else:
            system = SYSTEM.format(task=task, how=fmt.how("command"))
        if episode:
            user = self.turn(1, observation, admissible)
        elif self.template == "textworld":
            user = self._textworld(len(history) + 1, recent, observation, admissible)
        elif self.template == "answer":
            user = observation
        else:
            user = self._default(recent, observation, admissible)
        if fmt.name != "tag" and not native_tools:
            system += "\n" + fmt.tool_text(None if episode else admissible)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def turn(self, step: int, observation: str, admissible: Sequence[str] | None) -> str:
        """What one observation turn of a conversation says (step is 1-based): the window prompt's
        current-observation part, with no history (the conversation holds it)."""
        if self.template == "textworld":
            return self._textworld(step, [], observation, admissible)
        if self.template == "answer":
            return observation
        return self._default([], observation, admissible)

    def _default(self, recent, observation, admissible) -> str:
        lines = [f"Before: {obs}\n> {action}" for obs, action in recent]
        lines.append(f"Now: {observation}")
        if self.show_admissible and admissible:
            lines.append("Commands: " + " | ".join(admissible))
        return "\n".join(lines)

    def _textworld(self, step, recent, observation, admissible) -> str:
        lines = [f"Step {step}."]
        if recent:
            lines.append("Recent history:")
            first = step - len(recent)
            lines += [f"[{first + i}] {obs}\n> {action}" for i, (obs, action) in enumerate(recent)]
        lines.append(f"Current observation:\n{observation}")
        if self.show_admissible and admissible:
            lines.append("Admissible commands: " + ", ".join(admissible))
        return "\n".join(lines)
