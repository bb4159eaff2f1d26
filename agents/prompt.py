"""Prompts: system instructions + a memory window of recent steps + the current view.

Each env step is its own training sample, so the prompt is rebuilt from scratch every
step from the last `memory` (observation, action) pairs; its length stays bounded however
long the episode runs. The chat template of the model's tokenizer turns the messages into
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
        admissible: list[str] | None,
        native_tools: bool = False,
    ) -> list[dict[str, str]]:
        """`native_tools`: the chat template gets the tools through `tools=`, so they are not written here."""
        recent = history[-self.memory :] if self.memory else []
        fmt = self.action_format
        if self.template == "textworld":
            system = TEXTWORLD_SYSTEM.format(task=task, how=fmt.how("command"))
            user = self._textworld(history, recent, observation, admissible)
        elif self.template == "answer":  # one question, one answer: no memory, no command list
            system, user = ANSWER_SYSTEM.format(task=task, how=fmt.how("answer")), observation
        else:
            system, user = SYSTEM.format(task=task, how=fmt.how("command")), self._default(recent, observation, admissible)
        if fmt.name != "tag" and not native_tools:
            system += "\n" + fmt.tool_text(admissible)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _default(self, recent, observation, admissible) -> str:
        lines = [f"Before: {obs}\n> {action}" for obs, action in recent]
        lines.append(f"Now: {observation}")
        if self.show_admissible and admissible:
            lines.append("Commands: " + " | ".join(admissible))
        return "\n".join(lines)

    def _textworld(self, history, recent, observation, admissible) -> str:
        step = len(history) + 1
        lines = [f"Step {step}."]
        if recent:
            lines.append("Recent history:")
            first = step - len(recent)
            lines += [f"[{first + i}] {obs}\n> {action}" for i, (obs, action) in enumerate(recent)]
        lines.append(f"Current observation:\n{observation}")
        if self.show_admissible and admissible:
            lines.append("Admissible commands: " + ", ".join(admissible))
        return "\n".join(lines)
