"""Rubrics: per-task weighted criteria, each a check, with partial credit; YAML or JSON files.

    rubrics:
      default:                       # task types without a rubric of their own
        - {name: correct, check: numeric, weight: 4, gate: true, partial_within: 0.25}
        - {name: format, check: format, weight: 1}
      word-two-step:                 # info["task_type"] of the env
        - {name: correct, check: numeric, weight: 4, gate: true}
        - {name: shows_work, check: regex, pattern: '\\d+\\s*[*x]\\s*\\d+', target: response, weight: 1}
        - {name: concise, check: max_length, max_chars: 200, weight: 1}

A rubric's score is sum(weight x criterion score) / sum(weight), in [0, 1]. A `gate`
criterion that scores 0 sets the whole score to 0 (no credit for a well-formed wrong
answer). Checks (rewards/verifiers.py): exact, numeric, regex, contains, max_length,
format, env (the env's reward, clipped to [0, 1]). `target: action` (the parsed answer) or
`target: response` (the whole text) picks what a check reads. `description` is the text an
LLM judge is shown for the criterion. Every field is validated on load; a mistake is one
line naming the file and the field (`rubrics.add[1].pattern: ...`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from rewards import verifiers
from rewards.base import OUTCOME, FunctionScorer, RewardItem

CHECKS = ("exact", "numeric", "regex", "contains", "max_length", "format", "env")
COMMON = {"name", "check", "weight", "gate", "target", "description"}
OPTIONS = {  # check -> its own fields (required ones marked with *)
    "exact": set(),
    "numeric": {"tolerance", "rel_tolerance", "partial_within"},
    "regex": {"*pattern"},
    "contains": {"*text"},
    "max_length": {"*max_chars"},
    "format": set(),
    "env": set(),
}
DEFAULT_TARGET = {"exact": "action", "numeric": "action", "format": "response", "env": "response"}
TOP_LEVEL = {"rubrics", "version", "description"}


class RubricError(ValueError):
    """A mistake in a rubric file; the message names the file and the field."""


@dataclass(frozen=True)
class Criterion:
    name: str
    check: str
    weight: float = 1.0
    gate: bool = False
    target: str = "response"
    description: str = ""
    pattern: str = ""
    text: str = ""
    max_chars: int = 0
    tolerance: float = 1e-6
    rel_tolerance: float = 0.0
    partial_within: float = 0.0

    def score(self, item: RewardItem) -> float:
        target = item.action if self.target == "action" else item.response
        if self.check == "env":
            return min(1.0, max(0.0, item.env_reward))
        if self.check == "format":
            return verifiers.well_formed(item.response)
        if self.check == "max_length":
            return verifiers.max_length(target, self.max_chars)
        if self.check == "contains":
            return verifiers.contains(target, self.text)
        if self.check == "regex":
            return verifiers.regex(target, self.pattern, item.answer)
        if item.answer is None:
            raise ValueError(f"criterion {self.name!r} needs a reference answer; the env gives none")
        if self.check == "exact":
            return verifiers.exact(target, item.answer)
        return verifiers.numeric(target, item.answer, self.tolerance, self.rel_tolerance, self.partial_within)


@dataclass(frozen=True)
class Rubric:
    task_type: str
    criteria: tuple[Criterion, ...]

    def score(self, item: RewardItem) -> float:
        scores = [c.score(item) for c in self.criteria]
        if any(c.gate and s <= 0.0 for c, s in zip(self.criteria, scores)):
            return 0.0
        total = sum(c.weight for c in self.criteria)
        return sum(c.weight * s for c, s in zip(self.criteria, scores)) / total

    def describe(self) -> str:
        """The criteria as a bullet list, for a judge's prompt."""
        return "\n".join(f"- {c.description or c.name} (weight {c.weight:g})" for c in self.criteria)


class RubricSet:
    """All rubrics of one file, looked up by task type (falling back to `default`)."""

    def __init__(self, rubrics: dict[str, Rubric], path: str = "") -> None:
        self.rubrics, self.path = rubrics, path

    def for_task(self, task_type: str) -> Rubric:
        rubric = self.rubrics.get(task_type) or self.rubrics.get("default")
        if rubric is None:
            raise KeyError(f"no rubric for task type {task_type!r} and no default in {self.path}")
        return rubric


class RubricScorer(FunctionScorer):
    """`--reward rubric`: each answer scored by the rubric of its task type."""

    def __init__(self, rubrics: RubricSet, name: str = "rubric") -> None:
        super().__init__(name, lambda item: rubrics.for_task(item.task_type).score(item), OUTCOME, needs_answer=False)
        self.rubrics = rubrics


def load_rubrics(path: str | Path) -> RubricSet:
    """Read and validate a rubric file (YAML or JSON). Raises RubricError."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise RubricError(f"rubric file {str(path)!r} not found")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        first = str(e).strip().splitlines()[0]
        raise RubricError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {first}") from None
    where = str(path)
    if not isinstance(data, dict) or not isinstance(data.get("rubrics"), dict) or not data["rubrics"]:
        raise RubricError(
            f"{where}: rubrics: the file must hold a non-empty mapping `rubrics: {{task_type: [criteria]}}`"
        )
    for key in data:
        if key not in TOP_LEVEL:
            raise RubricError(f"{where}: {key}: unknown top-level field; allowed: {', '.join(sorted(TOP_LEVEL))}")
    rubrics = {}
    for task_type, criteria in data["rubrics"].items():
        field = f"rubrics.{task_type}"
        if not isinstance(criteria, list) or not criteria:
            raise RubricError(f"{where}: {field}: must be a non-empty list of criteria")
        parsed = tuple(_criterion(c, f"{where}: {field}[{i}]") for i, c in enumerate(criteria))
        names = [c.name for c in parsed]
        if len(set(names)) != len(names):
            raise RubricError(f"{where}: {field}: criterion names must be unique (got {names})")
        rubrics[str(task_type)] = Rubric(str(task_type), parsed)
    return RubricSet(rubrics, where)


def _criterion(raw, field: str) -> Criterion:
    if not isinstance(raw, dict):
        raise RubricError(f"{field}: a criterion is a mapping with at least `name` and `check`")
    for key in ("name", "check"):
        if key not in raw:
            raise RubricError(f"{field}.{key}: missing")
    check = raw["check"]
    if check not in CHECKS:
        raise RubricError(f"{field}.check: unknown check {check!r}; choose one of: {', '.join(CHECKS)}")
    own = {o.lstrip("*") for o in OPTIONS[check]}
    for key in raw:
        if isinstance(key, bool):  # YAML 1.1 reads a bare on/off/yes/no key as a boolean
            raise RubricError(f"{field}.{key}: a key read as a boolean (YAML on/off/yes/no); quote it or rename it")
        if key not in COMMON | own:
            allowed = ", ".join(sorted(COMMON | own))
            raise RubricError(f"{field}.{key}: not a field of a {check} criterion; allowed: {allowed}")
    for req in (o[1:] for o in OPTIONS[check] if o.startswith("*")):
        if req not in raw:
            raise RubricError(f"{field}.{req}: missing (a {check} criterion needs it)")
    values = dict(raw)
    values["name"] = str(values["name"])
    values.setdefault("target", DEFAULT_TARGET.get(check, "response"))
    if values["target"] not in ("action", "response"):
        raise RubricError(f"{field}.target: must be action or response (got {values['target']!r})")
    for key in ("weight", "tolerance", "rel_tolerance", "partial_within"):
        if key in values:
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise RubricError(f"{field}.{key}: must be a number >= 0 (got {value!r})")
            values[key] = float(value)
    if values.get("weight", 1.0) <= 0:
        raise RubricError(f"{field}.weight: must be > 0 (got {values['weight']!r})")
    if "max_chars" in values and (isinstance(values["max_chars"], bool) or not isinstance(values["max_chars"], int)
                                  or values["max_chars"] < 1):  # fmt: skip
        raise RubricError(f"{field}.max_chars: must be an integer >= 1 (got {values['max_chars']!r})")
    if "gate" in values and not isinstance(values["gate"], bool):
        raise RubricError(f"{field}.gate: must be true or false (got {values['gate']!r})")
    for key in ("pattern", "text", "description"):
        if key in values and not isinstance(values[key], str):
            raise RubricError(f"{field}.{key}: must be a string (got {values[key]!r})")
    if check == "regex":
        try:
            re.compile(values["pattern"].replace("{answer}", "0"))
        except re.error as e:
            raise RubricError(f"{field}.pattern: invalid regular expression '{values['pattern']}': {e}") from None
    return Criterion(**values)
