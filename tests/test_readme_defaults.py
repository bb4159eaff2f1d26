"""README's "Flags that matter" table against the code: every flag it names is an option, and every
default it states is the default the code has (one home for a default: the config sections)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from algos.config import DEFAULT_SFT_STEPS, Config, flat

ROOT = Path(__file__).resolve().parent.parent
CLI_ONLY = {"config", "list_envs", "resume", "fork"}  # flags that are not config fields: no default to state
RESOLVED = {"sft_steps": DEFAULT_SFT_STEPS}  # unset in the config, resolved to this before use
# Defaults the table describes in words: the code holds the "unset" value that the words explain.
DESCRIBED = {
    "output_dir": ("`runs/<env>-<algo>-s<seed>-<time>`", ""),
    "task_pool": ("env's pool or 256", 0),
    "min_update_samples": ("group_size", None),
    "rubric": ("env's rubric", ""),
    "wandb_entity": ("your default", ""),
    "wandb_name": ("the run directory's name", ""),
    "ray_address": ("local", ""),
    "lora_alpha": ("2 × rank", 0.0),
}


def table_rows(readme: str) -> list[tuple[list[str], list[str]]]:
    """(option names, stated defaults) per row of the table."""
    section = readme.split("## Flags that matter", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]  # `a\|b` is one cell's text
        names = [f.replace("-", "_") for f in re.findall(r"`--([a-z0-9-]+)", cells[0])]
        rows.append((names, [d.strip() for d in cells[1].split(", ")] if cells[1] else []))
    return rows


def matches(stated: str, value) -> bool:
    """A stated default read as the table writes them: `text`, on / off, none, numbers, `0 (why)`."""
    stated = re.sub(r" \(.*\)$", "", stated)
    if stated.startswith("`") and stated.endswith("`"):
        return value == stated[1:-1]
    if stated in ("on", "off"):
        return value == (stated == "on") or (stated == "off" and value in (0, None))
    if stated == "none":
        return value in ("", None)
    try:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and float(stated) == value
    except ValueError:
        return False


def mismatches(readme: str, defaults: dict) -> list[str]:
    out = []
    for names, stated in table_rows(readme):
        out += [f"--{n.replace('_', '-')}: not an option" for n in names if n not in defaults and n not in CLI_ONLY]
        if not stated:
            continue
        if len(stated) != len(names):
            out.append(f"{names}: {len(names)} flags but {len(stated)} defaults {stated}")
            continue
        for name, text in zip(names, stated):
            value = defaults.get(name)  # None: unset (resolved later) or not an option (reported above)
            if value is None:
                value = RESOLVED.get(name)
            if name in DESCRIBED:
                words, unset = DESCRIBED[name]
                if text != words or defaults[name] != unset:
                    out.append(f"--{name}: README says {text!r}, the code's default is {defaults[name]!r}")
            elif not matches(text, value):
                out.append(f"--{name}: README says {text!r}, the code's default is {value!r}")
    return out


def test_the_readme_defaults_are_the_code_defaults() -> None:
    found = mismatches((ROOT / "README.md").read_text(), flat(Config()))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("row, why", [
    ("| `--lr`, `--beta` | 1e-4, 0 | |", "--lr: README says '1e-4'"),
    ("| `--algo grpo\\|gigpo` | `grpo` | |", "--algo: README says '`grpo`'"),
    ("| `--dynamic-sampling` | off | |", "--dynamic_sampling: README says 'off'"),
    ("| `--num-groups`, `--group-size` | 8 | |", "2 flags but 1 defaults"),
    ("| `--num-grups` | 8 | |", "--num-grups: not an option"),
])  # fmt: skip
def test_the_checker_sees_a_wrong_default(row, why) -> None:
    readme = f"## Flags that matter\n\n| flag | default | meaning |\n|---|---|---|\n{row}\n\n## Next\n"
    assert any(why in m for m in mismatches(readme, flat(Config()))), mismatches(readme, flat(Config()))
