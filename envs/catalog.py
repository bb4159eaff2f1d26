"""The env catalog: `python -m envs` (and `python -m algos.train --list-envs`).

    python -m envs                         every registered text env, two lines each
    python -m envs KeyDoor-Hard-v0         one env: description, knobs with defaults, info keys
    python -m envs mypkg:MyEnv-v0          imports mypkg first (Gymnasium's syntax), then as above
    python -m envs --import mypkg          the list, with the envs mypkg registers

For each env: a one-line description, its knobs (keyword arguments of gymnasium.make, with
the registered values), its step limit, and which optional info keys it fills: an expert
(`expert_action`, for the SFT warm-up and the expert baseline), state keys (GiGPO anchors),
admissible commands, a reference answer (verifiers, rubrics, judges). Built-in envs declare
these in `metadata["info_keys"]`; any other env is made and reset once to find out. An
unknown id gets the closest registered ids.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import inspect
import sys

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

INFO_KEYS = {"expert_action": "expert", "state_key": "state keys", "admissible_commands": "admissible commands",
             "answer": "reference answer"}  # fmt: skip


def builtin_ids() -> dict[str, str]:
    """id -> one-line description of the envs this package registers."""
    import envs

    tables = (envs.KEYDOOR_IDS, envs.SOKOBAN_IDS, envs.SINGLE_TURN_IDS, envs.TEXTWORLD_IDS)
    return {env_id: doc for table in tables for env_id, (_, _, doc) in table.items()}


def text_env_ids(packages: list[str] = ()) -> list[str]:
    """The built-in ids, then the ids whose entry points live in the given (user) packages."""
    roots = {p.split(".")[0] for p in packages}

    def owner(spec) -> str:
        entry = spec.entry_point
        module = entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
        return module.split(".")[0]

    builtin = builtin_ids()
    return list(builtin) + sorted(i for i, spec in gym.registry.items() if owner(spec) in roots and i not in builtin)


def creator(env_id: str):
    entry = gym.spec(env_id).entry_point
    return load_env_creator(entry) if isinstance(entry, str) else entry


def info_keys(env_id: str) -> list[str]:
    """Optional info keys the env fills: declared in metadata, else found by one reset."""
    declared = (getattr(creator(env_id), "metadata", None) or {}).get("info_keys")
    if declared is not None:
        return [k for k in INFO_KEYS if k in declared]
    env = gym.make(env_id)
    try:
        _, info = env.reset(seed=0)
    finally:
        env.close()
    return [k for k in INFO_KEYS if info.get(k) is not None]


def knobs(env_id: str) -> str:
    """Keyword arguments of gymnasium.make: the registered values, then the class defaults."""
    spec = gym.spec(env_id)
    values = dict(spec.kwargs)
    try:
        params = inspect.signature(creator(env_id)).parameters
    except (TypeError, ValueError):
        params = {}
    for name, p in params.items():
        keyword = p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        if keyword and name not in values and name not in ("self", "render_mode"):
            values[name] = p.default if p.default is not inspect.Parameter.empty else "(required)"
    return ", ".join(f"{k}={v!r}" if isinstance(v, str) and v != "(required)" else f"{k}={v}" for k, v in values.items())


def description(env_id: str) -> str:
    builtin = builtin_ids()
    if env_id in builtin:
        return builtin[env_id]
    doc = inspect.getdoc(creator(env_id)) or ""
    return doc.strip().splitlines()[0] if doc.strip() else "(no docstring)"


def line(env_id: str) -> str:
    spec = gym.spec(env_id)
    limit = f"steps <= {spec.max_episode_steps}" if spec.max_episode_steps else "no step limit"
    keys = ", ".join(INFO_KEYS[k] for k in info_keys(env_id)) or "none of the optional info keys"
    return f"{env_id:28s} {description(env_id)}\n{'':28s} {limit}; {keys}; knobs: {knobs(env_id) or 'none'}"


def closest(env_id: str) -> list[str]:
    return difflib.get_close_matches(env_id.split(":")[-1], list(gym.registry), n=3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m envs", description="List the registered text envs.")
    p.add_argument("env_id", nargs="?", help="show one env (pkg:Env-v0 imports pkg first)")
    p.add_argument("--import", dest="imports", nargs="*", default=[], metavar="PKG",
                   help="import packages that register their own envs")  # fmt: skip
    args = p.parse_args(argv)
    import envs  # noqa: F401  (registers the built-in ids)

    modules = list(args.imports) + ([args.env_id.split(":")[0]] if args.env_id and ":" in args.env_id else [])
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            print(f"error: cannot import {module!r}: {e}", file=sys.stderr)
            return 2
    if args.env_id:
        name = args.env_id.split(":")[-1]
        if name not in gym.registry:
            hint = f"; did you mean {', '.join(closest(name))}?" if closest(name) else ""
            print(f"error: unknown env id {name!r}{hint}", file=sys.stderr)
            return 2
        print(line(name))
        return 0
    for env_id in text_env_ids(modules):
        print(line(env_id))
    return 0
