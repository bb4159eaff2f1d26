"""Env workers (envs/workers.py): the same trajectories in every pool, and faults contained per env or
per worker, in worker processes and in Ray actors."""

import json
import random
import time

import faulty_envs  # noqa: F401  (registers faulty_envs' ids in this process too)
import pytest

from agents.agent import Act
from algos.collector import Collector
from algos.config import ConfigError, from_flat
from algos.train import main as train_main
from algos.validate import validate
from envs.workers import LocalPool, ProcessPool, WorkerConfig, make_pool


class RandomAgent:
    """Picks an admissible command with its own seeded stream: the same choices wherever the envs live."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, views):
        return [Act(self.rng.choice(v.admissible) if v.admissible else "look", "ok", "", [1], [2], [0.0]) for v in views]


def rollouts(env_id: str, kwargs: dict, cfg: WorkerConfig, rounds: int = 2) -> list[tuple]:
    collector = Collector(env_id, 3, 4, kwargs, cfg)
    try:
        out = []
        for r in range(rounds):
            for t in collector.collect(RandomAgent(r), [10 * r + g for g in range(3)]):
                out += [(t.traj_id, s.t, s.observation, s.action, s.reward, s.terminated, s.truncated, s.won,
                         s.state_key, s.env_error) for s in t.steps]  # fmt: skip
        return out
    finally:
        collector.close()


POOLS = {"2 workers": WorkerConfig(env_workers=2), "5 workers": WorkerConfig(env_workers=5),
         "isolation": WorkerConfig(env_isolation=True)}  # fmt: skip


@pytest.mark.parametrize(("env_id", "kwargs"), [("KeyDoor-Hard-v0", {}), ("Arithmetic-v0", {"level": 2})])
def test_worker_pools_give_the_trajectories_of_in_process_stepping(env_id, kwargs):
    local = rollouts(env_id, kwargs, WorkerConfig())
    assert len(local) >= 24 and not any(row[-1] for row in local)
    for name, cfg in POOLS.items():
        assert rollouts(env_id, kwargs, cfg) == local, name


@pytest.mark.slow
def test_textworld_trajectories_are_the_same_in_worker_processes():
    kwargs = {"level": 3, "num_games": 3, "num_held_out": 2}  # the games tests/test_textworld.py plays
    local = rollouts("TextWorld-CoinCollector-v0", kwargs, WorkerConfig(), rounds=1)
    assert rollouts("TextWorld-CoinCollector-v0", kwargs, WorkerConfig(env_workers=2), rounds=1) == local
    pool = make_pool("TextWorld-CoinCollector-v0", 2, kwargs, WorkerConfig(env_workers=2))
    assert pool.num_tasks == 3  # the env's task pool reaches the data layer through the workers
    pool.close()


def test_the_pool_follows_the_config():
    assert isinstance(make_pool("KeyDoor-v0", 3), LocalPool)
    pool = make_pool("KeyDoor-v0", 3, cfg=WorkerConfig(env_workers=8))
    try:
        assert isinstance(pool, ProcessPool) and pool.workers == 3  # never more workers than envs
        assert [pool.owner(i) for i in range(3)] == [0, 1, 2]
        assert pool.observation_space is not None and pool.num_tasks is None
    finally:
        pool.close()
    assert WorkerConfig(env_isolation=True).workers_for(7) == 7 and WorkerConfig(env_workers=2).workers_for(7) == 2


@pytest.mark.parametrize(("flags", "message"), [
    ({"env_workers": -1}, "env_workers must be >= 0"),
    ({"env_workers": 2, "env_isolation": True}, "not both"),
    ({"env_backend": "ray"}, "pass --env-workers N"),
    ({"env_backend": "dask", "env_workers": 2}, "unknown env_backend 'dask'; choose one of: process, ray"),
    ({"ray_address": "auto", "env_workers": 2}, "--ray-address is for --env-backend ray"),
])  # fmt: skip
def test_bad_worker_settings_are_one_line(flags, message):
    with pytest.raises(ConfigError, match=message):
        validate(from_flat(flags))


def scripted_pool(n: int, workers: int, timeout: float) -> ProcessPool:
    pool = ProcessPool("faulty_envs:Scripted-v0", n, {}, timeout, workers)
    assert [s for s, _ in pool.run([(i, "reset", {"seed": i}) for i in range(n)])] == ["ok"] * n
    return pool


def test_a_crash_ends_every_running_episode_of_its_worker_and_only_those():
    pool = scripted_pool(4, 2, timeout=5.0)  # worker 0: envs 0, 2; worker 1: envs 1, 3
    try:
        out = pool.run([(0, "step", "finish"), (1, "step", "go"), (2, "step", "crash"), (3, "step", "go")])
        assert out[0][0] == "ok" and out[0][1][2]  # answered before the crash and ended its episode: it stands
        assert out[2] == ("error", "its env worker died (exit code 3)")
        assert out[1][0] == out[3][0] == "ok"  # the other worker went on
        assert pool.restarts == 1
        again = pool.run([(0, "reset", {"seed": 5}), (2, "reset", {"seed": 6})])
        assert [v[0] for _, v in again] == ["seed 5 step 0", "seed 6 step 0"]
    finally:
        pool.close()


def test_a_running_episode_answered_before_its_worker_died_ends_too():
    pool = scripted_pool(2, 1, timeout=5.0)
    try:
        out = pool.run([(0, "step", "go"), (1, "step", "crash")])
        assert out[0][0] == out[1][0] == "error"  # env 0's step went on, but its env is gone with the worker
    finally:
        pool.close()


def test_a_native_hang_kills_its_worker_after_twice_the_timeout_and_a_python_hang_is_cut_inside_it():
    pool = scripted_pool(4, 2, timeout=0.5)
    try:
        start = time.perf_counter()
        out = pool.run([(0, "step", "hang"), (1, "step", "sleep"), (2, "step", "go"), (3, "step", "raise")])
        took = time.perf_counter() - start
        assert out[0] == ("error", "no answer within 1 s; its env worker was killed")
        assert out[2][0] == "error"  # on the killed worker, after the hang: never answered
        assert out[1][0] == "error" and out[1][1].startswith("StepTimeout")  # cut by the worker's own timer
        assert out[3] == ("error", "RuntimeError: the env broke")
        assert pool.restarts == 1 and took < 5
        assert [s for s, _ in pool.run([(i, "reset", {"seed": i}) for i in range(4)])] == ["ok"] * 4
    finally:
        pool.close()


@pytest.mark.slow
def test_a_crashing_and_hanging_env_with_workers_loses_only_its_workers_episodes(tmp_path, monkeypatch):
    log = tmp_path / "faults.log"
    log.touch()
    monkeypatch.setenv("FAULT_LOG", str(log))  # the workers inherit it
    collector = Collector("faulty_envs:CrashyKeyDoor-v0", 2, 4, workers=WorkerConfig(env_step_timeout=1.0, env_workers=2))
    errors = steps = 0
    for round_, seeds in enumerate([[1, 2], [0, 10], [3, 4], [11, 12]]):  # crashes (seeds 1-4), hangs (0, 10-12)
        for t in collector.collect(RandomAgent(round_), seeds):
            steps += len(t.steps)
            errors += sum(s.env_error for s in t.steps)
            assert sum(s.env_error for s in t.steps) <= 1 and (not t.steps[-1].env_error or t.steps[-1].truncated)
    restarts = collector.pool.restarts
    collector.close()
    faults = log.read_text().split()
    assert "crash" in faults and "hang" in faults
    assert restarts == len(faults)  # every crash and every native hang cost its worker, once
    assert len(faults) <= errors <= 4 * len(faults) and steps > errors  # at most the worker's 4 episodes each
    print(f"{faults.count('crash')} crashes, {faults.count('hang')} hangs, {errors} env errors in {steps} steps")


def metrics(out) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))} for r in rows]


@pytest.mark.slow
def test_a_fixed_seed_run_is_the_same_with_env_workers(tmp_path):
    flags = ["--iterations", "2", "--num-groups", "2", "--group-size", "4", "--sft-steps", "4", "--sft-episodes", "4",
             "--eval-episodes", "4", "--eval-every", "2", "--max-new-tokens", "8", "--max-extra-groups", "1"]  # fmt: skip
    assert train_main([*flags, "--output-dir", str(tmp_path / "local")]) == 0
    assert train_main([*flags, "--env-workers", "2", "--output-dir", str(tmp_path / "workers")]) == 0
    local, workers = metrics(tmp_path / "local"), metrics(tmp_path / "workers")
    assert len(local) >= 3 and local == workers
    transcripts = [(tmp_path / d / "transcripts.jsonl").read_text() for d in ("local", "workers")]
    assert transcripts[0] == transcripts[1]


@pytest.fixture(scope="module")
def ray():
    ray = pytest.importorskip("ray")
    yield ray
    if ray.is_initialized():
        ray.shutdown()


@pytest.mark.slow
def test_ray_actors_give_the_same_trajectories_and_survive_a_crash_and_a_hang(ray):
    cfg = WorkerConfig(env_workers=2, env_backend="ray", env_step_timeout=3.0)
    assert rollouts("KeyDoor-Hard-v0", {}, cfg) == rollouts("KeyDoor-Hard-v0", {}, WorkerConfig())
    pool = make_pool("faulty_envs:Scripted-v0", 4, cfg=cfg)
    try:
        out = pool.run([(i, "reset", {"seed": i}) for i in range(4)])
        assert [s for s, _ in out] == ["ok"] * 4, out
        out = pool.run([(0, "step", "finish"), (1, "step", "go"), (2, "step", "crash"), (3, "step", "go")])
        assert out[2] == ("error", "its env worker died (its Ray actor exited)"), out
        # env 0's finished step stands if its answer left the actor before the crash (Ray does not promise that)
        assert out[0][0] == "error" or out[0][1][2], out
        assert out[1][0] == out[3][0] == "ok", out
        out = pool.run([(0, "reset", {"seed": 0}), (1, "step", "hang"), (3, "step", "go")])
        assert out[0][0] == "ok" and out[1] == ("error", "no answer within 6 s; its env worker was killed"), out
        assert out[2][0] == "error" and pool.restarts == 2
        again = pool.run([(i, "reset", {"seed": i}) for i in range(4)])  # both actors were restarted by Ray
        assert [v[0] for _, v in again] == [f"seed {i} step 0" for i in range(4)], again
        out = pool.run([(0, "step", "sleep"), (2, "step", "go")])  # an actor's own timer cuts a Python-level hang
        assert out[0][1].startswith("StepTimeout") and out[1][0] == "ok" and pool.restarts == 2, out
        again = pool.run([(i, "reset", {"seed": i}) for i in range(4)])
        assert [v[0] for _, v in again] == [f"seed {i} step 0" for i in range(4)], again
    finally:
        pool.close()


@pytest.mark.slow
def test_the_worker_benchmark_runs_small_and_checks_its_trajectories(tmp_path):
    from benchmarks.bench_textworld import main as bench

    out = tmp_path / "workers.json"
    assert bench(["workers", "--envs", "8", "--level", "3", "--games", "3", "--workers", "0", "2", "--collects", "1",
                  "--out", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    assert result["same_trajectories"] and [p["workers"] for p in result["pools"]] == [0, 2]
    assert all(p["rounds"] >= 2 and p["env_s"] > 0 for p in result["pools"])
