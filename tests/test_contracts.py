"""Contracts as code (docs/design.md): the Backend protocol and the env info TypedDict.

Backends: HFBackend is an instance of the runtime-checkable `Backend`, and HFBackend and
VLLMBackend (the class only: no engine starts) have every protocol method with the protocol's
parameters. Envs: every id this package registers gives, on reset, on each step of the expert's
episode and on an invalid action, info dicts whose keys are declared in `StepInfo`, with every
required key present and every value of its declared type. The checkers are tested on
counterexamples too, so the tests can fail.
"""

from __future__ import annotations

import importlib.util
import inspect
import types
from typing import Union, get_args, get_origin, get_type_hints

import gymnasium as gym
import pytest
import torch

import envs  # noqa: F401  (registers the built-in ids)
from agents.agent import LLMAgent
from agents.backend import Backend, HFBackend
from agents.generation import Sampling
from agents.vllm_backend import VLLMBackend
from algos.collector import Collector
from envs.base import StepInfo

HAS_TEXTWORLD = importlib.util.find_spec("textworld") is not None
PROTOCOL_METHODS = sorted(n for n, v in vars(Backend).items() if inspect.isfunction(v) and not n.startswith("_"))


# ---- checkers -------------------------------------------------------------------------------
def parameters(fn) -> list[tuple[str, inspect._ParameterKind]]:
    """(name, kind) of each parameter after `self`."""
    return [(p.name, p.kind) for p in list(inspect.signature(fn).parameters.values())[1:]]


def protocol_mismatches(cls: type) -> list[str]:
    """How `cls` departs from the Backend protocol: missing methods, other parameters."""
    out = []
    for name in PROTOCOL_METHODS:
        method = getattr(cls, name, None)
        if not callable(method):
            out.append(f"{cls.__name__} has no {name}()")
        elif parameters(method) != parameters(getattr(Backend, name)):
            want = inspect.signature(getattr(Backend, name))
            out.append(f"{cls.__name__}.{name}{inspect.signature(method)}: the protocol has {name}{want}")
    return out


def conforms(value, hint) -> bool:
    """Whether `value` has the declared type; only the forms StepInfo uses are understood."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(conforms(value, arg) for arg in get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = get_args(hint)
        return isinstance(value, list) and all(conforms(v, item) for v in value)
    if hint in (str, bool):
        return isinstance(value, hint)
    raise TypeError(f"conforms() does not know the annotation {hint!r}: teach it before using it in StepInfo")


def info_problems(info: dict) -> list[str]:
    hints = get_type_hints(StepInfo)
    problems = [f"key {k!r} is not declared in StepInfo" for k in info if k not in hints]
    problems += [f"required key {k!r} is missing" for k in sorted(StepInfo.__required_keys__) if k not in info]
    problems += [f"info[{k!r}] = {info[k]!r} is not {hints[k]}" for k in info if k in hints and not conforms(info[k], hints[k])]  # fmt: skip
    return problems


# ---- Backend ----------------------------------------------------------------------------------
def test_backend_protocol_holds_the_methods_the_trainer_calls():
    assert PROTOCOL_METHODS == ["close", "generate", "release", "sync"]


def test_hf_backend_satisfies_the_protocol():
    backend = HFBackend(torch.nn.Linear(1, 1), eos_ids=[0], pad_id=0)
    assert isinstance(backend, Backend)
    assert protocol_mismatches(HFBackend) == []


def test_vllm_backend_class_has_the_protocol_methods_and_signatures():
    assert issubclass(VLLMBackend, Backend)  # methods only: the class can be checked without an engine
    assert protocol_mismatches(VLLMBackend) == []


def test_the_backend_checks_reject_a_wrong_backend():
    class NoRelease:
        def generate(self, prompts, sampling):
            return [], []

        def sync(self, model):
            pass

        def close(self):
            pass

    class RenamedArgument(NoRelease):
        def generate(self, batch, sampling):  # the protocol's parameter is `prompts`
            return [], []

        def release(self):
            pass

    assert not isinstance(NoRelease(), Backend)
    assert protocol_mismatches(NoRelease) == ["NoRelease has no release()"]
    assert isinstance(RenamedArgument(), Backend)  # isinstance checks names only ...
    assert len(protocol_mismatches(RenamedArgument)) == 1  # ... the signature check sees the parameter


def test_places_that_take_a_backend_are_annotated_with_the_protocol():
    from algos.weight_sync import logprob_gap

    assert get_type_hints(LLMAgent.__init__)["backend"] is Backend
    assert get_type_hints(logprob_gap)["backend"] is Backend
    assert get_type_hints(Backend.generate)["sampling"] is Sampling


# ---- env info -----------------------------------------------------------------------------------
def builtin_ids() -> list[str]:
    """Registered ids whose entry point lives in this project's envs package."""
    return sorted(i for i, spec in gym.registry.items() if isinstance(spec.entry_point, str)
                  and spec.entry_point.split(":")[0].split(".")[0] == "envs")  # fmt: skip


def make(env_id: str) -> gym.Env:
    """The env, with the smallest TextWorld pools (games are generated into the session cache)."""
    entry = gym.spec(env_id).entry_point
    if entry.endswith(":TextWorldFamilyEnv"):
        return gym.make(env_id, level=1, num_games=1, num_held_out=0)
    if entry.endswith(":TextWorldGamesEnv"):
        from envs.tw_games import game_path, pool_seeds

        gym.make("TextWorld-CoinCollector-v0", level=1, num_games=1, num_held_out=0).close()
        return gym.make(env_id, games=[str(game_path("coin", 1, s)) for s in pool_seeds(1, False)])
    return gym.make(env_id)


def env_params() -> list:
    skip = pytest.mark.skipif(not HAS_TEXTWORLD, reason="no textworld")
    return [pytest.param(i, marks=skip) if gym.spec(i).entry_point.startswith("envs.tw_env:") else i for i in builtin_ids()]


def test_builtin_ids_cover_keydoor_arithmetic_and_textworld():
    ids = builtin_ids()
    assert {"KeyDoor-v0", "KeyDoor-Easy-v0", "Arithmetic-v0", "WordProblems-v0", "TextWorld-Games-v0"} <= set(ids)


@pytest.mark.parametrize("env_id", env_params())
def test_reset_and_step_infos_are_step_infos(env_id):
    env = make(env_id)
    try:
        _, info = env.reset(seed=0)
        infos = [info]
        assert info["expert_action"] is not None, "every built-in env has an expert"
        for _ in range(100):  # the expert's episode, to its end (TimeLimit truncates at the latest)
            _, _, term, trunc, info = env.step(info["expert_action"])
            infos.append(info)
            if term or trunc:
                break
        assert term and infos[-1]["won"], "the expert wins"
        env.reset(seed=1)
        _, _, _, _, info = env.step("xyzzy frobnicate")  # a command no env knows, and no number
        assert info["action_valid"] is False
        infos.append(info)
    finally:
        env.close()
    for n, info in enumerate(infos):
        assert info_problems(info) == [], f"{env_id}, info {n}"


def test_an_env_failure_in_the_collector_still_gives_a_step_info(monkeypatch):
    collector = Collector("KeyDoor-Easy-v0", 1, 1)
    obs, info = collector.reset_env(0, 0)

    def broken(action):
        raise OSError("the interpreter died")

    monkeypatch.setattr(collector.pool.host.env(0), "step", broken)
    _, _, term, trunc, info = collector.step_env(0, "go north", obs, info)
    collector.close()
    assert trunc and not term and info["error"] and info_problems(info) == []


def test_the_info_check_rejects_a_wrong_info():
    good = {"state_key": "hall", "admissible_commands": ["go north"], "won": False, "lost": False,
            "expert_action": None, "task": "win", "action_valid": True, "answer": "4"}  # fmt: skip
    assert info_problems(good) == []
    assert info_problems({**good, "admissible_commands": None}) == []
    bad = {**good, "won": 0, "admissible_commands": ["go", 3], "hint": "north"}
    del bad["task"]
    problems = info_problems(bad)
    assert len(problems) == 4, problems
    for key in ("'hint' is not declared", "'task' is missing", "['won'] = 0", "['admissible_commands'] = ['go', 3]"):
        assert any(key in p for p in problems), (key, problems)
    with pytest.raises(TypeError):
        conforms(1.0, float)  # an annotation the checker does not understand fails loudly
