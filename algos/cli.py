"""The trainer's command line: flags, YAML presets, `--env-kwargs`, and the argv of `--resume`.

    python -m algos.train --config configs/default.yaml --iterations 5 --algo grpo
    python -m algos.train --env TextWorld-CoinCollector-v0 --env-kwargs level 10 num_games 200
    python -m algos.train --resume runs/KeyDoor-v0-gigpo-s0-20261203-101500 --iterations 32

Precedence: defaults < the presets that a named model or env brings (algos/presets.py) < a YAML
preset (`--config`) < flags. A preset maps options to values, flat or by section (algos/config.py);
its values are checked against the options' types as they enter.
`--env-kwargs KEY VALUE ...` (or `KEY=VALUE`) passes keyword arguments to gymnasium.make, each
value read as YAML (10 -> int, true -> bool, [a, b] -> list), a preset's `env_kwargs:` mapping
overridden key by key; `max_episode_steps` sets the time limit. `--resume RUN_DIR` reads the run's
own options (config.yaml and what earlier resumes changed, algos/lineage.py) as the lowest layer the
user gives, so flags given with it (more `--iterations`) still win, and `--fork NEW_DIR` makes the
continuation a new run. Every mistake is a ConfigError with one line naming the problem and the fix.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import tyro
import yaml

from algos import lineage, presets
from algos.config import HINTS, SECTIONS, Config, ConfigError, from_flat

HELP = "Train an LLM agent on a multi-step text env with GRPO, GiGPO or RLOO (docs/design.md)."


def load_preset(path: str) -> dict:
    """A YAML preset's {option: value} (flat, or a section name mapping to its options), keys and value
    types checked (`typed`). Raises ConfigError (one line naming the file)."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} not found; pass a YAML file from configs/")
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}{where}: not valid YAML ({problem})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of option: value")
    try:
        from_flat({k: v for k, v in data.items() if k != "env_kwargs"})
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return data


def key_value_pairs(tokens: list[str]) -> dict[str, str]:
    """`--env-kwargs` as {KEY: VALUE}, written `KEY VALUE`, `KEY=VALUE` or both mixed (the trainer and
    the scripts read it alike): a token `KEY=VALUE` is one pair, any other token is a KEY and the next
    its VALUE (which may hold "="). Raises ConfigError."""
    out, i = {}, 0
    while i < len(tokens):
        key, sep, value = tokens[i].partition("=")
        if sep and key.isidentifier():
            out[key], i = value, i + 1
        elif i + 1 < len(tokens):
            out[tokens[i]], i = tokens[i + 1], i + 2
        else:
            raise ConfigError(f"--env-kwargs: {tokens[i]!r} has no value; pass KEY VALUE or KEY=VALUE, "
                              "e.g. --env-kwargs level 5 num_games=200")  # fmt: skip
    return out


def parse_config(argv: list[str] | None = None, saved: tuple[str, dict] | None = None) -> Config:
    """Defaults < a named model's or env's preset (algos/presets.py) < `saved` (a resumed run's own options,
    labelled by where they come from) < --config YAML < flags. Raises ConfigError on a user mistake."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra_env_kwargs = _pop_env_kwargs(argv)
    layers = [saved] if saved else []  # (label, preset), lowest first; flags go on top
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise ConfigError("--config needs a path, e.g. --config configs/default.yaml")
        path = argv[i + 1]
        del argv[i : i + 2]
        layers.append((path, load_preset(path)))
    cfg = _cli(layers, extra_env_kwargs, argv)  # what the user asked for: which model, which env
    if model := presets.model_preset(cfg.model):  # under --config; its env counts where the user named none
        layers.insert(0, (str(model), load_preset(str(model))))
        cfg = _cli(layers, extra_env_kwargs, argv)
    if env := presets.env_preset(cfg.env):  # the env the run ends up with; lowest of all
        layers.insert(0, (str(env), load_preset(str(env))))
        cfg = _cli(layers, extra_env_kwargs, argv)
    return cfg


def _cli(layers: list[tuple[str, dict]], extra_env_kwargs: dict[str, str], argv: list[str]) -> Config:
    """The presets in order (a later one wins; env_kwargs merge key by key), then the flags."""
    values: dict = {}
    env_kw: dict[str, str] = {}
    for label, preset in layers:
        if isinstance(preset.get("env_kwargs"), dict):  # the CLI type is str -> str; values are re-read as YAML
            env_kw.update({str(k): v if isinstance(v, str) else json.dumps(v)  # JSON is YAML
                           for k, v in preset["env_kwargs"].items()})  # fmt: skip
        elif "env_kwargs" in preset:
            raise ConfigError(f"{label}: env_kwargs must be a mapping, e.g. env_kwargs: {{level: 5}}")
        for key, value in preset.items():  # a section's mapping merges option by option, like flat keys
            if key in SECTIONS and isinstance(value, dict):
                values.update(value)
            elif key != "env_kwargs":
                values[key] = value
    base = replace(from_flat(values), env_kwargs={**env_kw, **extra_env_kwargs})  # flags override key by key
    box = io.StringIO()  # what tyro says on stderr: an error box becomes one line; anything else passes through
    try:
        with contextlib.redirect_stderr(box):
            cfg = tyro.cli(Config, default=base, args=list(argv), description=HELP, prog="python -m algos.train")
    except SystemExit as e:
        if e.code:  # a flag tyro could not read (exit 2); --help exits 0, its text on stdout as ever
            raise ConfigError(_flag_error(box.getvalue(), argv)) from None
        sys.stderr.write(box.getvalue())
        raise
    sys.stderr.write(box.getvalue())
    return cfg


_KINDS = {"INT": "an integer", "FLOAT": "a number", "STR": "text", "{None}": "None"}  # tyro's metavars


def _flag_error(box: str, argv: list[str]) -> str:
    """tyro's error box (UTF-8 or ASCII, maybe coloured) for flags it could not read, as one line: the flag, the
    value and what it takes; a switch given a value; or the unknown options and the flags tyro suggests."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", box)  # no colours
    lines = [line.rstrip().rstrip("│").rstrip().removeprefix("│") for line in plain.splitlines()]  # indents kept
    rows = [r for r in (line.strip() for line in lines) if r and not r.startswith(("╭", "╰")) and set(r) - set("─-")]
    text = " ".join(rows)  # a message that tyro wrapped is whole again
    if m := re.search(r"Error parsing (--\S+): (.*?) (?:Argument helptext: --\S+ (\S+)|For full helptext)", text):
        flag, message, metavar = m.groups()
        given = re.findall(r"'([^']*)'", message)
        if given and metavar:
            return f"{flag}: {given[-1]!r} is not {' or '.join(_KINDS.get(k, k) for k in metavar.split('|'))}"
        return f"{flag}: {message}"
    if m := re.search(r"invalid choice '(.*?)' for argument '(\S+)'\. Expected one of \((.*?)\)", text):
        choices = ", ".join(re.findall(r"'([^']*)'", m.group(3)))
        return f"{m.group(2)}: {m.group(1)!r} is not one of {choices}"
    if m := re.search(r"Missing value for argument '(\S+)'", text):
        return f"{m.group(1)} needs a value"
    m = re.search(r"Unrecognized options: (.*?)(?= Perhaps you meant:| Arguments similar to| For full help|$)", text)
    if not m:  # another failure: tyro's own words
        return re.sub(r" ?For full helptext.*", "", text) or "cannot read the flags (python -m algos.train --help)"
    tokens = m.group(1).split(", ")
    for before, token in zip(argv, argv[1:]):  # `--overwrite yes`: a switch takes no value
        name = before.removeprefix("--").removeprefix("no-").replace("-", "_")
        if token in tokens and before.startswith("--") and HINTS.get(name) is bool:
            on = "--" + name.replace("_", "-")
            return f"{before} is a switch and takes no value (got {token!r}): pass {on} or --no-{on[2:]}"
    unknown = [t for t in tokens if t.startswith("-")]
    if not unknown:
        return f"unexpected value {', '.join(map(repr, tokens))}: each flag takes one value"
    close, header = [], None  # the flags listed under "Perhaps you meant:" / "Arguments similar to --x:", 4 in
    for line in lines:
        row = line.lstrip()
        indent = len(line) - len(row)
        if row.startswith(("Perhaps you meant", "Arguments similar to")):
            header = indent
        elif header is not None and indent <= header:
            header = None
        elif header is not None and indent == header + 4 and row.startswith("--"):
            close.append(row.split()[0].rstrip(","))
    hint = f"; did you mean {', '.join(dict.fromkeys(close))}?" if close else " (python -m algos.train --help)"
    return f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}{hint}"


def _pop_env_kwargs(argv: list[str]) -> dict[str, str]:
    """Take `--env-kwargs KEY VALUE [KEY=VALUE ...]` out of argv."""
    if "--env-kwargs" not in argv:
        return {}
    i = j = argv.index("--env-kwargs")
    while j + 1 < len(argv) and not argv[j + 1].startswith("--"):
        j += 1
    values = argv[i + 1 : j + 1]
    del argv[i : j + 1]
    if not values:
        raise ConfigError("--env-kwargs takes KEY VALUE pairs, e.g. --env-kwargs level 5 num_games 200")
    return key_value_pairs(values)


def resume_argv(argv: list[str]) -> tuple[list[str], lineage.Resume | None]:
    """`--resume RUN_DIR [--fork NEW_DIR]` taken out of argv: (the argv left, with the run directory it
    writes as --output-dir, and the Resume), or (argv, None) without --resume. The saved options are
    the layer under any --config and flags (`parse_config(argv, saved=...)`). Raises ConfigError."""
    argv = list(argv)
    if "--fork" in argv and "--resume" not in argv:
        raise ConfigError("--fork NEW_DIR continues a run as a new one: pass it with --resume RUN_DIR")
    if "--resume" not in argv:
        return argv, None
    source, fork = _pop_path(argv, "--resume"), _pop_path(argv, "--fork") if "--fork" in argv else None
    if not (source / "config.yaml").is_file():
        raise ConfigError("--resume needs a run directory with a config.yaml (the --output-dir of a run)")
    if fork is None and "--overwrite" in argv:
        raise ConfigError("--overwrite starts a new run and --resume continues one: pass one of them")
    if fork is not None and fork.resolve() == source.resolve():
        raise ConfigError(f"--fork {fork} is the run it continues; name a new run directory")
    if "--output-dir" in argv:
        raise ConfigError("--resume writes to its run directory (--fork NEW_DIR: to NEW_DIR); leave --output-dir out")
    resume = lineage.Resume(source, lineage.saved_config(source), fork)
    return [*argv, "--output-dir", str(resume.output_dir), *([] if fork else ["--no-overwrite"])], resume


def _pop_path(argv: list[str], flag: str) -> Path:
    i = argv.index(flag)
    if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
        raise ConfigError(f"{flag} needs a run directory")
    path = Path(argv[i + 1])
    del argv[i : i + 2]
    return path
