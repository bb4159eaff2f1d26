"""Prompts: system instructions + a memory window of recent steps + the current view.

Each env step is its own training sample, so the prompt is rebuilt from scratch every
step from the last `memory` (observation, action) pairs; its length stays bounded however
long the episode runs. The chat template of the model's tokenizer turns the messages into
token ids, so a real instruct model sees its own format.
"""

from __future__ import annotations

SYSTEM = (
    "Task: {task}\n"
    "Reply with one command from the list as <action>command</action>; "
    "you may think first in <think></think>."
)


class PromptBuilder:
    """Builds chat messages for one step of one env."""

    def __init__(self, memory: int = 2, show_admissible: bool = True) -> None:
        if memory < 0:
            raise ValueError("memory must be >= 0")
        self.memory = memory
        self.show_admissible = show_admissible

    def messages(
        self,
        task: str,
        history: list[tuple[str, str]],
        observation: str,
        admissible: list[str] | None,
    ) -> list[dict[str, str]]:
        lines = []
        recent = history[-self.memory :] if self.memory else []
        if recent:
            lines += [f"Before: {obs}\n> {action}" for obs, action in recent]
        lines.append(f"Now: {observation}")
        if self.show_admissible and admissible:
            lines.append("Commands: " + " | ".join(admissible))
        return [
            {"role": "system", "content": SYSTEM.format(task=task)},
            {"role": "user", "content": "\n".join(lines)},
        ]
