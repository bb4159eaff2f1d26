"""Action parsing: model text -> (command, status). Never raises, whatever the bytes.

Expected format: optional `<think>...</think>`, then `<action>command</action>`. The
status taxonomy lets the trainer count and penalise each failure mode separately:

    ok              one action tag, non-empty, admissible (or no admissible list given)
    no_action_tag   no complete <action>...</action> (includes output cut at max tokens)
    empty           the tag holds only whitespace
    multiple_actions more than one action tag; the first is used, still counted invalid
    not_admissible  the command is not in the env's admissible list

Matching against admissible commands ignores case and repeated whitespace, and returns the
env's own spelling of the command.
"""

from __future__ import annotations

import re

OK = "ok"
NO_ACTION_TAG = "no_action_tag"
EMPTY = "empty"
MULTIPLE = "multiple_actions"
NOT_ADMISSIBLE = "not_admissible"
STATUSES = (OK, NO_ACTION_TAG, EMPTY, MULTIPLE, NOT_ADMISSIBLE)

_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
MAX_ACTION_CHARS = 200


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def parse_action(text: object, admissible: list[str] | None = None) -> tuple[str, str]:
    """Returns (command, status). The command is "" when there is nothing to send."""
    if not isinstance(text, str):
        text = str(text)
    text = text.replace("\x00", "")
    found = _ACTION.findall(text)
    if not found:
        return "", NO_ACTION_TAG
    command = normalize(found[0])[:MAX_ACTION_CHARS]
    if not command:
        return "", EMPTY
    if admissible is not None:
        by_norm = {normalize(c): c for c in admissible}
        if command not in by_norm:
            return command, NOT_ADMISSIBLE
        command = by_norm[command]
    return command, (MULTIPLE if len(found) > 1 else OK)
