"""Env faults are contained and counted; any text through the parser and the env step path."""

import itertools
import json
import random
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import envs  # noqa: F401
from agents.agent import Act
from agents.parser import parse_action
from algos.collector import Collector
from algos.train import main as train_main
from envs.keydoor import KeyDoorEnv
from envs.workers import StepTimeout, WorkerConfig, deadline

sys.path.insert(0, str(Path(__file__).parent))
from adversarial import adversarial_strings  # noqa: E402
from cold_start import COLD_UPDATES

INJECTED = {"raise": 0, "hang": 0}
_FAULT_SEEDS = itertools.count()


class FaultyKeyDoor(KeyDoorEnv):
    """KeyDoor whose step raises on ~10 % of calls and hangs for 30 s on ~1 %."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.faults = random.Random(next(_FAULT_SEEDS))  # its own stream: faults do not follow the layout

    def step(self, action):
        roll = self.faults.random()
        if roll < 0.01:
            INJECTED["hang"] += 1
            time.sleep(30)
        elif roll < 0.11:
            INJECTED["raise"] += 1
            raise RuntimeError("injected fault")
        return super().step(action)


gym.register(id="FaultyKeyDoor-v0", entry_point=FaultyKeyDoor, max_episode_steps=20)


@pytest.mark.slow
def test_a_faulty_env_trains_to_the_end_and_every_fault_is_counted(tmp_path):
    INJECTED.update({"raise": 0, "hang": 0})
    out = tmp_path / "run"
    flags = ["--env", "FaultyKeyDoor-v0", "--iterations", "3", "--env-step-timeout", "0.2", "--sft-steps", "0",
             "--eval-episodes", "0", "--num-groups", "2", "--group-size", "4", "--max-new-tokens", "6",
             "--max-extra-groups", "1", "--output-dir", str(out), *COLD_UPDATES]  # fmt: skip
    start = time.perf_counter()
    assert train_main(flags) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    counted = sum(r.get("rollout/env_errors", 0) for r in rows)
    assert INJECTED["hang"] >= 1 and INJECTED["raise"] >= 10
    assert counted == INJECTED["raise"] + INJECTED["hang"]
    print(f"injected {INJECTED}, counted {counted:g}, {sum(r.get('rollout/steps', 0) for r in rows):g} steps")
    assert len([r for r in rows if "train/loss" in r]) == 3
    assert time.perf_counter() - start < 30 * INJECTED["hang"]  # hangs were cut at the timeout
    record = json.loads((out / "transcripts.jsonl").read_text().splitlines()[0])
    assert record["steps"]


class ScriptedText:
    """An agent whose responses are given texts (as the model would produce them)."""

    def __init__(self, texts):
        self.texts = iter(texts)

    def act(self, views):
        out = []
        for v in views:
            text = next(self.texts, "")
            command, status = parse_action(text, list(v.admissible) if v.admissible is not None else None)
            out.append(Act(command, status, text, [1], [2], [0.0]))
        return out


@pytest.mark.parametrize(("env_id", "kwargs"), [("KeyDoor-v0", {}), ("Arithmetic-v0", {"level": 3}),
                                                ("WordProblems-v0", {"level": 3})])  # fmt: skip
def test_env_step_path_survives_any_text(env_id, kwargs):
    texts = adversarial_strings(1200, seed=hash(env_id) % 1000)
    collector = Collector(env_id, num_groups=4, group_size=4, env_kwargs=kwargs)
    space = collector.pool.observation_space
    steps = 0
    agent = ScriptedText(texts)
    while True:
        trajs = collector.collect(agent, list(range(4)))
        for t in trajs:
            for s in t.steps:
                steps += 1
                assert space.contains(s.observation) and not s.env_error
        if next(agent.texts, None) is None:
            break
    assert steps >= 1000


def test_deadline_interrupts_a_hang_and_is_off_at_zero():
    start = time.perf_counter()
    with pytest.raises(StepTimeout), deadline(0.1):
        time.sleep(5)
    assert time.perf_counter() - start < 2
    with deadline(0):
        time.sleep(0.01)  # no timer


def test_a_failed_reset_is_retried_on_a_fresh_env():
    calls = {"n": 0}

    class FlakyReset(KeyDoorEnv):
        def reset(self, *, seed=None, options=None):
            calls["n"] += 1
            if calls["n"] == 1:
                raise OSError("interpreter did not start")
            return super().reset(seed=seed, options=options)

    gym.register(id="FlakyReset-v0", entry_point=FlakyReset, max_episode_steps=3)
    collector = Collector("FlakyReset-v0", num_groups=1, group_size=2)
    trajs = collector.collect(ScriptedText(["<action>look</action>"] * 10), [0])
    assert len(trajs) == 2 and all(t.steps for t in trajs) and calls["n"] == 3


# -- numeric guards ------------------------------------------------------------------------
def test_a_nan_loss_leaves_weights_and_optimizer_bit_identical(tiny):
    import copy

    import torch

    from algos.config import LearnerConfig
    from algos.learner import Learner
    from algos.logprobs import Sample

    model, tok = tiny
    model = copy.deepcopy(model)
    learner = Learner(model, LearnerConfig(rollout_is="off", autocast="off", num_minibatches=1, ppo_epochs=1), tok.pad_token_id)
    ids = tok("<action>go north</action>", add_special_tokens=False)["input_ids"]
    good = [Sample([1, 2, 3], ids, 1.0, [-1.0] * len(ids)), Sample([4, 5], ids, -1.0, [-1.0] * len(ids))]
    learner.update(good)  # the optimizer has state now
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    opt_state = copy.deepcopy(learner.optimizer.state_dict())
    poisoned = [good[0], Sample([4, 5], ids, float("nan"), [-1.0] * len(ids))]  # a NaN advantage: NaN loss
    stats = learner.update(poisoned)
    assert stats["train/skipped_frac"] == 1.0
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    after = learner.optimizer.state_dict()
    assert after["param_groups"] == opt_state["param_groups"]
    assert all(torch.equal(a, b) for p in opt_state["state"] for a, b in
               zip(opt_state["state"][p].values(), after["state"][p].values()))  # fmt: skip
    assert learner.update(good)["train/skipped_frac"] == 0.0  # and training goes on
    assert not all(torch.equal(weights[k], v) for k, v in model.state_dict().items())


def nan_on(iterations, monkeypatch):
    """Make the advantages of the given iterations NaN (an injected non-finite loss)."""
    import numpy as np

    import algos.run

    original, calls = algos.run.compute_advantages, {"n": 0}

    def poisoned(algo, cfg, steps):
        adv, stats = original(algo, cfg, steps)
        calls["n"] += 1  # the iteration's batch (TINY has two groups)
        return (np.full_like(adv, np.nan) if calls["n"] in iterations else adv), stats

    monkeypatch.setattr(algos.run, "compute_advantages", poisoned)


TINY = ["--num-groups", "2", "--group-size", "2", "--sft-steps", "2", "--sft-episodes", "2", "--eval-episodes", "0",
        "--max-new-tokens", "6", "--max-extra-groups", "0", "--no-dynamic-sampling", *COLD_UPDATES]  # fmt: skip


@pytest.mark.slow
def test_a_nan_iteration_is_skipped_and_the_run_continues(tmp_path, monkeypatch):
    nan_on({2}, monkeypatch)
    out = tmp_path / "run"
    assert train_main([*TINY, "--iterations", "3", "--output-dir", str(out)]) == 0
    rows = {r["iteration"]: r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if "train/skipped_frac" in r}  # fmt: skip
    assert [rows[i]["train/skipped_frac"] for i in (1, 2, 3)] == [0.0, 1.0, 0.0]


@pytest.mark.slow
def test_repeated_nan_updates_stop_with_the_last_good_weights(tmp_path, monkeypatch, capsys):
    from safetensors.torch import load_file

    nan_on(set(range(1, 100)), monkeypatch)
    out = tmp_path / "run"
    assert train_main([*TINY, "--iterations", "10", "--max-bad-updates", "3", "--output-dir", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: 3 updates in a row had a non-finite loss") and "iter_3" in err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/skipped_frac"] for r in rows if "train/skipped_frac" in r] == [1.0, 1.0, 1.0]  # iteration 3 logged
    warm = load_file(out / "checkpoints" / "iter_0" / "model.safetensors")
    last = load_file(out / "checkpoints" / "iter_3" / "model.safetensors")
    assert all(np.array_equal(warm[k].numpy(), last[k].numpy()) for k in warm)  # no update ever applied


@pytest.mark.slow
def test_isolated_envs_survive_crashes_and_native_hangs(tmp_path, monkeypatch):
    log = tmp_path / "faults.log"
    log.touch()
    monkeypatch.setenv("FAULT_LOG", str(log))  # the env processes inherit it
    collector = Collector("faulty_envs:CrashyKeyDoor-v0", num_groups=2, group_size=2,
                          workers=WorkerConfig(env_step_timeout=1.0, env_isolation=True))
    texts = ["<action>go north</action>", "<action>go east</action>", "<action>go south</action>"] * 200
    agent = ScriptedText(texts)
    errors = steps = 0
    for round_ in range(4):
        for t in collector.collect(agent, [round_ * 2, round_ * 2 + 1]):
            steps += len(t.steps)
            errors += sum(s.env_error for s in t.steps)
    collector.close()
    faults = log.read_text().split()
    assert "crash" in faults and "hang" in faults
    assert errors == len(faults) and steps > errors
    print(f"{faults.count('crash')} crashes, {faults.count('hang')} hangs, {errors} env errors in {steps} steps")


@pytest.mark.slow
def test_training_with_isolated_envs_survives_crashes(tmp_path, monkeypatch):
    log = tmp_path / "faults.log"
    log.touch()
    monkeypatch.setenv("FAULT_LOG", str(log))
    out = tmp_path / "run"
    flags = ["--env", "faulty_envs:CrashyKeyDoor-v0", "--env-isolation", "--env-step-timeout", "1", "--iterations",
             "2", "--num-groups", "2", "--group-size", "2", "--sft-steps", "2", "--sft-episodes", "3",
             "--eval-episodes", "2", "--max-new-tokens", "6", "--max-extra-groups", "0", "--output-dir", str(out)]  # fmt: skip
    assert train_main(flags) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("rollout/env_errors", 0) for r in rows) >= 1 and "crash" in log.read_text()
