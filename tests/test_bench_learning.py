"""benchmarks.bench_learning (its plan, jobs and settings) and its report (benchmarks/learning_report.py)
against hand-computed values, with no training."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from algos.evaluation import interval95, mean_std
from benchmarks.bench_learning import Job, check_settings, plan, run_jobs
from benchmarks.learning_presets import COMPARISONS, PRESETS, Preset
from benchmarks.learning_report import (
    band,
    is_finished,
    paired_differences,
    plot,
    steps_to_reach,
    summarize,
    table,
)

CURVE = [(0.0, 0.30), (2600.0, 0.45), (5200.0, 0.50), (7800.0, 0.80), (10400.0, 0.70)]


def test_steps_to_reach_is_the_first_evaluation_at_or_above():
    assert steps_to_reach(CURVE, 0.5) == 5200.0  # equal counts
    assert steps_to_reach(CURVE, 0.475) == 5200.0  # not interpolated to 3900 between 0.45 and 0.50
    assert steps_to_reach(CURVE, 0.8) == 7800.0  # the first time, though it falls back later
    assert steps_to_reach(CURVE, 0.3) == 0.0  # the warm-up already there
    assert steps_to_reach(CURVE, 0.9) is None
    assert steps_to_reach([], 0.5) is None


def test_mean_std_is_the_sample_std():
    mean, std = mean_std([0.5, 0.6, 0.7])
    assert mean == pytest.approx(0.6) and std == pytest.approx(0.1)  # sqrt((0.01 + 0 + 0.01) / 2)
    mean, std = mean_std([1, 2, 3, 4])
    assert mean == 2.5 and std == pytest.approx(math.sqrt(5 / 3))  # ddof=1; ddof=0 would be sqrt(5/4)
    mean, std = mean_std([0.4])
    assert mean == 0.4 and math.isnan(std)
    assert all(math.isnan(v) for v in mean_std([]))


def test_paired_differences_in_points_for_shared_seeds():
    gigpo = {0: 0.60, 1: 0.50, 2: 0.75}
    grpo = {0: 0.50, 1: 0.55, 2: 0.75, 3: 0.90}  # seed 3 has no GiGPO run: left out
    diff = paired_differences(gigpo, grpo)
    assert list(diff) == [0, 1, 2]
    assert diff[0] == pytest.approx(10.0) and diff[1] == pytest.approx(-5.0) and diff[2] == pytest.approx(0.0)
    mean, std = mean_std(list(diff.values()))
    assert mean == pytest.approx(5 / 3) and std == pytest.approx(
        math.sqrt(((25 / 3) ** 2 + (20 / 3) ** 2 + (5 / 3) ** 2) / 2)
    )


def test_band_holds_each_run_latest_evaluation():
    a = [(0.0, 0.2), (100.0, 0.4), (200.0, 0.6)]
    b = [(0.0, 0.4), (150.0, 0.8)]  # ends first: holds 0.8 at x=200
    xs, mean, std = band([a, b])
    assert xs == [0.0, 100.0, 150.0, 200.0]
    assert mean == pytest.approx([0.3, 0.4, 0.6, 0.7])
    assert std == pytest.approx([math.sqrt(0.02), 0.0, math.sqrt(0.08), math.sqrt(0.02)])
    assert steps_to_reach(list(zip(xs, mean)), 0.6) == 150.0  # the mean curve's crossing


def _rows(evals: dict[int, float], steps_per_iteration: int, iterations: int, final: bool) -> list[dict]:
    """A run's metrics rows as algos.train writes them: iteration rows, periodic evals after theirs."""
    rows = [{"iteration": 0, "eval/success_rate": evals[0]}]
    for it in range(1, iterations + 1):
        rows.append({"iteration": it, "rollout/success_rate": 0.5, "rollout/invalid_action_rate": 0.4 - 0.1 * it,
                     "data/env_steps_total": float(it * steps_per_iteration)})  # fmt: skip
        if it in evals and (it < iterations or final):
            rows.append({"iteration": it, "eval/success_rate": evals[it]})
    return rows


def test_is_finished_needs_the_final_evaluation_after_the_budget():
    assert is_finished(_rows({0: 0.3, 2: 0.5, 3: 0.6}, 1000, 3, final=True), budget=3000)
    assert not is_finished(_rows({0: 0.3, 2: 0.5, 3: 0.6}, 1000, 3, final=False), budget=3000)  # killed before it
    # killed right after a periodic evaluation: that evaluation is not the final one (budget unspent)
    assert not is_finished(_rows({0: 0.3, 2: 0.5}, 1000, 2, final=True), budget=3000)
    assert not is_finished(_rows({0: 0.3}, 1000, 0, final=False), budget=3000)
    assert not is_finished([], budget=3000)
    # an iteration cap ends a run whose budget is not spent: finished after the cap's final evaluation
    assert is_finished(_rows({0: 0.3, 2: 0.5, 3: 0.6}, 1000, 3, final=True), budget=10**6, iterations=3)
    assert not is_finished(_rows({0: 0.3, 2: 0.5, 3: 0.6}, 1000, 3, final=False), budget=10**6, iterations=3)
    assert not is_finished(_rows({0: 0.3, 2: 0.5}, 1000, 2, final=True), budget=10**6, iterations=3)


def test_summary_table_and_curves_from_run_folders(tmp_path: Path):
    preset = Preset("KeyDoor-v0", "configs/default.yaml", (), budget=3000, eval_every=2, eval_episodes=64)
    finals = {("gigpo", 0): 0.75, ("grpo", 0): 0.5, ("gigpo", 1): 0.5, ("grpo", 1): 0.6}
    for (algo, seed), final in finals.items():
        run = tmp_path / "keydoor" / f"s{seed}" / algo
        run.mkdir(parents=True)
        rows = _rows({0: 0.3 + 0.1 * seed, 2: 0.45, 3: final}, 1000, 3, final=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    unfinished = tmp_path / "keydoor" / "s2" / "gigpo"  # left out of the summary
    unfinished.mkdir(parents=True)
    (unfinished / "metrics.jsonl").write_text(json.dumps({"iteration": 0, "eval/success_rate": 0.9}) + "\n")

    summary = summarize(tmp_path, {"keydoor": preset}, [0, 1, 2], COMPARISONS)
    s = json.loads(json.dumps(summary))["presets"]["keydoor"]  # what summary.json holds
    gigpo = s["algos"]["gigpo"]
    assert gigpo["seeds"] == [0, 1]
    assert gigpo["final_mean_std"] == pytest.approx([0.625, math.sqrt(2 * 0.125**2)])
    assert gigpo["warm_up_mean_std"] == pytest.approx([0.35, math.sqrt(0.005)])
    assert gigpo["steps_to"]["50%"]["seeds"] == {"0": 3000.0, "1": 3000.0}
    assert gigpo["steps_to"]["80%"] == {"seeds": {"0": None, "1": None}, "mean_curve": None}
    (c,) = json.loads(json.dumps(summary))["comparisons"]
    assert (c["a"], c["b"]) == ("keydoor/gigpo", "keydoor/grpo")
    assert c["seeds"] == pytest.approx({"0": 25.0, "1": -10.0})
    assert c["mean_std"] == pytest.approx([7.5, math.sqrt(2 * 17.5**2)])
    # two seeds: t(0.975, 1) = 12.706, half-width 12.706 x 24.75 / sqrt(2) = 222.4
    assert c["interval95"] == pytest.approx([7.5 - 12.706 * 17.5, 7.5 + 12.706 * 17.5])

    text = table(summary)
    assert ("| keydoor | KeyDoor-v0 | gigpo | 2 | 35.0 ± 7.1 | 62.5 ± 17.7 | 3.0k (3.0k, 3.0k) | never (never, never) "
            "| 30.0 → 10.0 |") in text  # fmt: skip
    assert "| keydoor/gigpo − keydoor/grpo | +7.5 ± 24.7 | [-214.9, +229.9] | s0: +25.0, s1: -10.0 |" in text
    plot(summary, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_interval95_hand_computed():
    # n = 5, mean 2, sample std sqrt(2.5): t(0.975, 4) = 2.776, half-width 2.776 x 1.5811 / sqrt(5) = 1.9630
    lo, hi = interval95([0.0, 1.0, 2.0, 3.0, 4.0])
    assert (lo, hi) == pytest.approx((2 - 1.96296, 2 + 1.96296), abs=1e-4)
    assert all(math.isnan(v) for v in interval95([1.0]))


def test_a_preset_can_start_from_another_preset_s_warm_ups(tmp_path: Path):
    ref = Preset("KeyDoor-Hard-v0", "configs/gigpo_verl_agent.yaml", (), budget=3000, eval_every=2, eval_episodes=8)
    other = dataclasses.replace(ref, config="configs/keydoor_hard.yaml", algos=("gigpo",), warm_from="ref")
    jobs, _ = plan(tmp_path, {"ref": ref, "other": other}, [0])
    assert [j.name for j in jobs] == ["ref/s0/warm", "ref/s0/gigpo", "ref/s0/grpo", "other/s0/gigpo"]
    assert jobs[3].after == "ref/s0/warm"
    cmd = jobs[3].cmd
    assert cmd[cmd.index("--model") + 1] == str(tmp_path / "ref/s0/warm")


def test_plan_skips_what_is_done_and_the_algorithms_differ_only_in_algo(tmp_path: Path):
    from algos.run_dir import TRAINER_STATE

    preset = Preset("KeyDoor-v0", "configs/default.yaml", (), budget=3000, eval_every=2, eval_episodes=64)
    jobs, done = plan(tmp_path, {"keydoor": preset}, [0])
    assert [j.name for j in jobs] == ["keydoor/s0/warm", "keydoor/s0/gigpo", "keydoor/s0/grpo"] and not done
    gigpo, grpo = jobs[1].cmd, jobs[2].cmd
    assert [(a, b) for a, b in zip(gigpo, grpo) if a != b] == [("gigpo", "grpo"), (str(tmp_path / "keydoor/s0/gigpo"),
                                                                                   str(tmp_path / "keydoor/s0/grpo"))]  # fmt: skip
    assert gigpo[gigpo.index("--max-env-steps") + 1] == "3000" and gigpo[gigpo.index("--seed") + 1] == "0"

    (tmp_path / "keydoor/s0/warm").mkdir(parents=True)
    (tmp_path / "keydoor/s0/warm" / TRAINER_STATE).write_bytes(b"")
    (tmp_path / "keydoor/s0/gigpo").mkdir()
    rows = _rows({0: 0.3, 2: 0.5, 3: 0.6}, 1000, 3, final=True)
    (tmp_path / "keydoor/s0/gigpo/metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    jobs, done = plan(tmp_path, {"keydoor": preset}, [0])
    assert [j.name for j in jobs] == ["keydoor/s0/grpo"] and done == {"keydoor/s0/warm"}
    (tmp_path / "keydoor/s0/grpo").mkdir()
    (tmp_path / "keydoor/s0/grpo/metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.rmtree(tmp_path / "keydoor/s0/warm")  # the warm-up is gone (runs/ is not in git), the runs' metrics kept
    assert plan(tmp_path, {"keydoor": preset}, [0]) == ([], set())  # nothing to do: no warm-up made again


def test_run_jobs_waits_for_dependencies_and_skips_after_a_failure(tmp_path: Path):
    def job(name: str, code: str, after: str | None = None) -> Job:
        return Job(name, [sys.executable, "-c", code], tmp_path / f"{name}.log", after)

    marker = tmp_path / "order.txt"
    write = f"open({str(marker)!r}, 'a').write('{{}}')"
    jobs = [
        job("b", write.format("b"), after="a"),
        job("a", write.format("a")),
        job("bad", "raise SystemExit(3)", after="a"),
        job("c", write.format("c"), after="bad"),  # skipped
        job("d", write.format("d"), after="w"),  # w: done before
    ]
    done = {"w"}
    failed = run_jobs(jobs, 2, done)
    assert failed == {"bad", "c"}
    assert done == {"w", "a", "b", "d"}
    text = marker.read_text()
    assert sorted(text) == ["a", "b", "d"] and text.index("a") < text.index("b")


def test_a_cut_run_resumes_from_its_checkpoint_and_one_without_any_starts_over(tmp_path: Path):
    from algos.run_dir import TRAINER_STATE

    preset = Preset("KeyDoor-v0", "configs/default.yaml", (), budget=3000, eval_every=2, eval_episodes=64)
    (tmp_path / "keydoor/s0/warm").mkdir(parents=True)
    (tmp_path / "keydoor/s0/warm" / TRAINER_STATE).write_bytes(b"")
    cut, fresh = tmp_path / "keydoor/s0/gigpo", tmp_path / "keydoor/s0/grpo"
    (cut / "checkpoints/iter_4").mkdir(parents=True)
    (cut / "checkpoints/iter_4" / TRAINER_STATE).write_bytes(b"")
    (cut / "config.yaml").write_text("{}")
    (fresh / "checkpoints/iter_0").mkdir(parents=True)  # cut while writing its first checkpoint: nothing to resume
    (fresh / "config.yaml").write_text("{}")
    jobs, _ = plan(tmp_path, {"keydoor": preset}, [0])
    resume, start = jobs
    assert resume.cmd[1:] == ["-m", "algos.train", "--resume", str(cut)] and resume.before is None
    flag = {f: start.cmd[start.cmd.index(f) + 1] for f in ("--save-every", "--keep-checkpoints")}
    assert flag == {"--save-every": "1", "--keep-checkpoints": "1"}
    start.before()  # what a fresh start clears first
    assert not fresh.exists() and cut.exists()


def test_summary_only_starts_nothing_and_keeps_the_finished_runs(tmp_path: Path, capsys, monkeypatch):
    import benchmarks.bench_learning as bench

    monkeypatch.setattr(bench, "run_jobs", lambda *a: pytest.fail("--summary started a job"))
    run = tmp_path / "keydoor/s1/gigpo"
    run.mkdir(parents=True)
    rows = _rows({0: 0.3, 2: 0.5, 3: 0.6}, 1000, 3, final=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    budget = ["--budget-scale", str(3000 / PRESETS["keydoor"].budget)]
    assert bench.main(["--envs", "keydoor", "--seeds", "0", "1", "--out", str(tmp_path), "--summary", *budget]) == 0
    gigpo = json.loads((tmp_path / "summary.json").read_text())["presets"]["keydoor"]["algos"]["gigpo"]
    assert gigpo["seeds"] == [1] and gigpo["final"] == {"1": 0.6}
    assert "jobs not done; the summary holds the finished runs only" in capsys.readouterr().err


def test_settings_saved_before_a_field_existed_still_match(tmp_path: Path):
    preset = Preset("KeyDoor-v0", "configs/default.yaml", (), budget=3000, eval_every=2, eval_episodes=64)
    saved = json.loads(json.dumps(dataclasses.asdict(preset)))
    del saved["iterations"]  # written before Preset had it; its default is what those runs used
    (tmp_path / "settings.json").write_text(json.dumps({"keydoor": saved}))
    assert check_settings(tmp_path, {"keydoor": preset}) is None
    assert json.loads((tmp_path / "settings.json").read_text())["keydoor"]["iterations"] == 0
    message = check_settings(tmp_path, {"keydoor": dataclasses.replace(preset, iterations=16)})
    assert message is not None and "keydoor" in message and "--out" in message


def test_an_iteration_capped_preset_passes_its_cap_and_keeps_the_budget(tmp_path: Path):
    preset = Preset("KeyDoor-v0", "configs/default.yaml", (), budget=10**5, eval_every=4, eval_episodes=32,
                    iterations=16, algos=("gigpo",))  # fmt: skip
    (tmp_path / "keydoor/s0/warm").mkdir(parents=True)
    _, run = plan(tmp_path, {"keydoor": preset}, [0])[0]  # the warm-up, then the run
    flag = {f: run.cmd[run.cmd.index(f) + 1] for f in ("--iterations", "--max-env-steps")}
    assert flag == {"--iterations": "16", "--max-env-steps": "100000"}


def test_an_extending_preset_continues_copies_of_its_source_runs(tmp_path: Path):
    from algos.run_dir import TRAINER_STATE
    from benchmarks.bench_learning import with_sources

    assert with_sources(["keydoor-26k", "keydoor"]) == ["keydoor", "keydoor-26k"]  # the source runs first
    assert PRESETS["keydoor-26k"].extends == "keydoor"
    short = Preset("KeyDoor-v0", "configs/default.yaml", (), budget=3000, eval_every=2, eval_episodes=64)
    long = dataclasses.replace(short, budget=6000, extends="short")
    src = tmp_path / "short/s0/gigpo"
    (src / "checkpoints/iter_3").mkdir(parents=True)
    (src / "checkpoints/iter_3" / TRAINER_STATE).write_bytes(b"state")
    (src / "config.yaml").write_text("{}")
    (src / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows({0: 0.3, 3: 0.6}, 1000, 3, True)))

    jobs, done = plan(tmp_path, {"short": short, "long": long}, [0])
    # the unfinished source run (grpo) and its warm-up are planned; the long runs wait for their sources
    assert [(j.name, j.after) for j in jobs] == [("short/s0/warm", None), ("short/s0/grpo", "short/s0/warm"),
                                                 ("long/s0/gigpo", "short/s0/gigpo"),
                                                 ("long/s0/grpo", "short/s0/grpo")]  # fmt: skip
    assert done == {"short/s0/gigpo"}  # finished: its extension can start at once
    extend = jobs[2]
    run = tmp_path / "long/s0/gigpo"
    assert extend.cmd[1:] == ["-m", "algos.train", "--resume", str(run), "--max-env-steps", "6000",
                              "--iterations", "6000"]  # fmt: skip
    extend.before()  # the copy, made whole
    assert (run / "checkpoints/iter_3" / TRAINER_STATE).read_bytes() == b"state"
    assert (run / "metrics.jsonl").read_text() == (src / "metrics.jsonl").read_text()
    assert not (tmp_path / "long/s0/gigpo.copying").exists()
    again = {j.name: j for j in plan(tmp_path, {"short": short, "long": long}, [0])[0]}
    assert again["long/s0/gigpo"].before is None  # cut after the copy: it resumes from its own checkpoint
    assert again["long/s0/gigpo"].cmd == extend.cmd


def test_held_out_invalid_actions_after_the_warm_up_and_at_the_end(tmp_path: Path):
    preset = Preset("KeyDoor-v0", "configs/default.yaml", (), budget=3000, eval_every=2, eval_episodes=64,
                    algos=("gigpo",))  # fmt: skip
    held = {0: 0.10, 2: 0.25, 3: 0.04}  # per evaluation iteration
    for seed, scale in ((0, 1.0), (1, 0.5)):
        rows = _rows({0: 0.3, 2: 0.45, 3: 0.6}, 1000, 3, final=True)
        for r in rows:
            if "eval/success_rate" in r:
                r["eval/invalid_action_rate"] = scale * held[r["iteration"]]
        run = tmp_path / "keydoor" / f"s{seed}" / "gigpo"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    old = tmp_path / "keydoor/s2/gigpo"  # a run from before the metric: no held-out column for it
    old.mkdir(parents=True)
    rows = _rows({0: 0.3, 2: 0.45, 3: 0.6}, 1000, 3, final=True)
    (old / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    gigpo = json.loads(json.dumps(summarize(tmp_path, {"keydoor": preset}, [0, 1, 2])))["presets"]["keydoor"]
    gigpo = gigpo["algos"]["gigpo"]
    assert gigpo["seeds"] == [0, 1, 2]
    assert gigpo["held_out_invalid"]["0"] == pytest.approx([0.10, 0.04])
    assert gigpo["held_out_invalid"]["1"] == pytest.approx([0.05, 0.02]) and "2" not in gigpo["held_out_invalid"]
    assert gigpo["held_out_invalid_mean"] == pytest.approx([0.075, 0.03])
    row = next(line for line in table(summarize(tmp_path, {"keydoor": preset}, [0, 1, 2])).splitlines()
               if line.startswith("| keydoor |"))  # fmt: skip
    assert row.endswith("| 30.0 → 10.0 | 7.5 → 3.0 |")


def test_each_ablation_changes_one_setting_of_its_base_and_is_compared_with_it():
    from algos.cli import parse_config
    from benchmarks.learning_presets import ABLATION_BASES

    def settings(p: Preset) -> dict:
        cfg = parse_config(["--config", p.config, *p.flags])
        return {f"{name}.{k}": v for name in ("advantages", "learner", "sampling", "data")
                for k, v in dataclasses.asdict(getattr(cfg, name)).items()}  # fmt: skip

    assert len(ABLATION_BASES) == 16
    for key, base_key in ABLATION_BASES.items():
        p, base = PRESETS[key], PRESETS[base_key]
        changed = {f.name for f in dataclasses.fields(Preset) if getattr(p, f.name) != getattr(base, f.name)}
        assert changed - {"algos", "warm_from"} in ({"flags"}, {"sft_steps"}), key
        a, b = settings(p), settings(base)
        differ = {k for k in a if a[k] != b[k]}
        assert differ in ({"advantages.episode_baseline"}, {"learner.lr"}, {"learner.ppo_epochs"}, {"learner.target_kl"},
                          {"advantages.norm"}, {"sampling.temperature"}, {"data.num_groups", "data.group_size"},
                          set()), (key, differ)  # fmt: skip
        assert bool(differ) != (changed - {"algos", "warm_from"} == {"sft_steps"}), key  # one change, never none
        assert ((key, "gigpo"), (base_key, "gigpo")) in COMPARISONS
        if differ:  # an RL setting starts from its base's very warm-ups
            assert p.warm_from == (base.warm_from or base_key), key


def test_the_default_job_is_the_step_placement_and_earlier_presets_name_theirs():
    from algos.advantages import RETURN_PLACEMENT
    from algos.cli import parse_config
    from benchmarks.learning_presets import PENALTY_STEP

    default = parse_config([]).advantages
    assert (default.episode_baseline, default.penalty_placement) == ("step", "auto")  # auto: step under gigpo, grpo
    assert PENALTY_STEP == ("--penalty-placement", "step", "--episode-baseline", "step")
    assert PRESETS["keydoor-penalty-step"].flags == PENALTY_STEP
    assert set(RETURN_PLACEMENT) <= set(PRESETS["keydoor"].flags)  # its committed runs reproduce


def test_algos_restricts_the_runs_started(tmp_path: Path):
    preset = Preset("KeyDoor-v0", "configs/default.yaml", (), budget=3000, eval_every=2, eval_episodes=64)
    jobs, _ = plan(tmp_path, {"keydoor": preset}, [0, 1], algos=["gigpo"])
    assert [j.name for j in jobs] == ["keydoor/s0/warm", "keydoor/s0/gigpo", "keydoor/s1/warm", "keydoor/s1/gigpo"]


def test_lift_over_the_warm_up_per_seed_over_seeds_and_paired_over_tasks(tmp_path: Path):
    """final - warm-up per seed (points) from the metrics, their mean and t interval over seeds, and where a run
    wrote held_out.jsonl its paired interval over the tasks (the first evaluation against the last)."""
    from algos.evaluation import newcombe_paired

    preset = Preset("KeyDoor-Easy-v0", "configs/smollm2-135m.yaml", (), budget=10**6, eval_every=3, eval_episodes=4,
                    iterations=3, algos=("gigpo",))  # fmt: skip
    for seed, (warm, final) in enumerate([(0.25, 0.75), (0.5, 0.25)]):
        run = tmp_path / "smollm2" / f"s{seed}" / "gigpo"
        run.mkdir(parents=True)
        rows = _rows({0: warm, 3: final}, 40, 3, final=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = [7, 8, 9, 10]
    held = [{"iteration": 0, "task": tasks, "won": [True, False, False, False], "steps": [5, 20, 20, 20]},
            {"iteration": 3, "task": tasks, "won": [True, True, True, False], "steps": [4, 6, 9, 20]}]  # fmt: skip
    (tmp_path / "smollm2/s0/gigpo/held_out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))

    summary = summarize(tmp_path, {"smollm2": preset}, [0, 1])
    gigpo = json.loads(json.dumps(summary))["presets"]["smollm2"]["algos"]["gigpo"]
    assert gigpo["lift"] == pytest.approx({"0": 50.0, "1": -25.0})
    assert gigpo["lift_mean_std"] == pytest.approx([12.5, math.sqrt(2 * 37.5**2)])
    assert gigpo["lift_interval95"] == pytest.approx([12.5 - 12.706 * 37.5, 12.5 + 12.706 * 37.5])
    _, low, high = newcombe_paired([True, False, False, False], [True, True, True, False])
    assert gigpo["lift_paired"] == {"0": pytest.approx([50.0, 100 * low, 100 * high, 4])}  # s1 wrote no episodes
    row = next(line for line in table(summary).splitlines() if line.startswith("| smollm2/gigpo |"))
    assert row == (f"| smollm2/gigpo | 2 | +12.5 ± 53.0 | [-464.0, +489.0] "
                   f"| s0: +50.0 [{100 * low:+.1f}, {100 * high:+.1f}] (4), s1: -25.0 |")  # fmt: skip


def test_each_attempt_of_a_job_is_recorded_with_its_threads_and_machine(tmp_path: Path):
    code = "import os, sys; sys.exit(0 if os.environ['OMP_NUM_THREADS'] == '2' else 5)"
    record = tmp_path / "gigpo.attempts.jsonl"
    job = Job("run", [sys.executable, "-c", code], tmp_path / "run.log", attempts=record)
    assert run_jobs([job], 1, set(), threads=2) == set()
    assert run_jobs([job], 1, set(), threads=1) == {"run"}
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(r["rc"], r["threads"], r["jobs"]) for r in rows] == [(0, 2, 1), (5, 1, 1)]
    assert all(r["seconds"] >= 0 and r["machine"]["cores"] >= 1 and "flags" in r["machine"] for r in rows)


def test_a_packed_study_unpacks_to_the_same_summary_with_its_checkpoints_hashed(tmp_path: Path):
    """runs.json.xz keeps config, metrics, held-out episodes and attempts; unpacked into another folder, the
    summary is the one of the original runs; the newest whole checkpoint and the warm-up are hashed."""
    import hashlib

    from algos.run_dir import TRAINER_STATE
    from benchmarks.evidence import pack, read_pack, unpack

    preset = Preset("KeyDoor-Easy-v0", "configs/smollm2-135m.yaml", (), budget=10**6, eval_every=3, eval_episodes=2,
                    iterations=3, algos=("gigpo",))  # fmt: skip
    out = tmp_path / "study"
    run = out / "smollm2/s0/gigpo"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("lr: 5.0e-06\nseed: 0\n")
    rows = _rows({0: 0.5, 3: 1.0}, 40, 3, final=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    held = [{"iteration": 0, "task": [1, 2], "won": [True, False], "steps": [3, 9]},
            {"iteration": 3, "task": [1, 2], "won": [True, True], "steps": [3, 4]}]  # fmt: skip
    (run / "held_out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))
    (run.parent / "gigpo.attempts.jsonl").write_text(json.dumps({"seconds": 60.0, "rc": 0}) + "\n")
    for folder, weights in ((run / "checkpoints/iter_3", b"final"), (run / "checkpoints/iter_4", b"cut"),
                            (run.parent / "warm", b"warm")):  # fmt: skip
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(weights)
    for whole in (run / "checkpoints/iter_3", run.parent / "warm"):  # iter_4 was cut before its trainer state
        (whole / TRAINER_STATE).write_bytes(b"")

    pack(out, ["smollm2/s0/gigpo", "smollm2/s1/gigpo"], tmp_path / "evidence")
    data = read_pack(tmp_path / "evidence")
    assert list(data["runs"]) == ["smollm2/s0/gigpo"]  # s1 never ran
    packed = data["runs"]["smollm2/s0/gigpo"]
    assert packed["config"] == {"lr": 5e-6, "seed": 0} and packed["held_out"] == held
    assert packed["attempts"] == [{"seconds": 60.0, "rc": 0}]
    final = hashlib.sha256(b"final").hexdigest()
    assert packed["checkpoint"] == {"name": "iter_3", "sha256": {"model.safetensors": final}}
    assert data["warm_ups"] == {"smollm2/s0/warm": {"model.safetensors": hashlib.sha256(b"warm").hexdigest()}}

    (run.parent.parent / "s1/gigpo").mkdir(parents=True)  # a second run, packed on its own later
    (run.parent.parent / "s1/gigpo/metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    pack(out, ["smollm2/s1/gigpo"], tmp_path / "evidence")
    assert list(read_pack(tmp_path / "evidence")["runs"]) == ["smollm2/s0/gigpo", "smollm2/s1/gigpo"]  # both kept
    shutil.rmtree(run.parent.parent / "s1")

    again = tmp_path / "again"
    assert unpack(tmp_path / "evidence", again) == ["smollm2/s0/gigpo", "smollm2/s1/gigpo"]
    assert unpack(tmp_path / "evidence", again) == []  # there already: left alone
    summary = summarize(out, {"smollm2": preset}, [0])
    assert summarize(again, {"smollm2": preset}, [0]) == summary
    assert summary["presets"]["smollm2"]["algos"]["gigpo"]["lift_paired"][0][0] == 50.0


def test_summary_packs_the_study_and_unpack_remakes_it_elsewhere(tmp_path: Path, capsys, monkeypatch):
    import benchmarks.bench_learning as bench

    monkeypatch.setattr(bench, "run_jobs", lambda *a: pytest.fail("--summary started a job"))
    run = tmp_path / "study/smollm2/s0/gigpo"
    run.mkdir(parents=True)
    rows = _rows({0: 0.25, 16: 0.5}, 40, 16, final=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ["--envs", "smollm2", "--seeds", "0", "--summary"]
    assert bench.main([*common, "--out", str(tmp_path / "study"), "--pack", str(tmp_path / "evidence")]) == 0
    assert {p.name for p in (tmp_path / "evidence").iterdir()} == {"runs.json.xz", "summary.json", "summary.md",
                                                                    "curves.png"}  # fmt: skip
    assert bench.main([*common, "--out", str(tmp_path / "again"), "--unpack", str(tmp_path / "evidence")]) == 0
    assert (tmp_path / "again/summary.md").read_text() == (tmp_path / "evidence/summary.md").read_text()
    assert "| smollm2/gigpo | 1 | +25.0 | - | s0: +25.0 |" in (tmp_path / "again/summary.md").read_text()
    assert bench.main([*common, "--out", str(tmp_path / "x"), "--unpack", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.strip().endswith(f"error: --unpack {tmp_path / 'nothing'}: no runs.json.xz there")


def test_the_sft_control_continues_the_warm_up_and_is_paired_with_the_rl_runs_warm_up(tmp_path: Path):
    """The `sft` arm: the preset's warm-up made again and run control_steps further, no RL iteration, the same
    held-out tasks; its warm-up side (success, held-out episodes) is the first evaluation of an RL run of the
    same seed, so its lift and RL's are over the same warm-up and comparable seed by seed."""
    from algos.evaluation import newcombe_paired

    preset = Preset("KeyDoor-Easy-v0", "configs/smollm2-135m.yaml", ("--lr", "1e-6"), budget=10**6, eval_every=3,
                    eval_episodes=4, iterations=3, sft_steps=30, algos=("gigpo", "sft"), control_steps=120)  # fmt: skip
    jobs, _ = plan(tmp_path, {"smollm2": preset}, [0])
    assert [j.name for j in jobs] == ["smollm2/s0/warm", "smollm2/s0/gigpo", "smollm2/s0/sft"]
    sft = jobs[2].cmd
    assert sft[sft.index("--sft-steps") + 1] == "150" and sft[sft.index("--iterations") + 1] == "0"
    assert "--model" not in sft and "--algo" not in sft and sft[sft.index("--lr") + 1] == "1e-6"  # the config's model
    assert sft[sft.index("--eval-episodes") + 1] == "4" and sft[sft.index("--seed") + 1] == "0"

    seed = tmp_path / "smollm2/s0"
    for arm, rows, held in (
        ("gigpo", _rows({0: 0.25, 3: 0.75}, 40, 3, final=True),
         [{"iteration": 0, "won": [True, False, False, False]}, {"iteration": 3, "won": [True, True, True, False]}]),
        ("sft", [{"iteration": 0, "sft/loss": 0.1}, {"iteration": 0, "eval/success_rate": 0.5}],
         [{"iteration": 0, "won": [True, True, False, False]}]),
    ):  # fmt: skip
        (seed / arm).mkdir(parents=True)
        (seed / arm / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        lines = [json.dumps({**h, "task": [1, 2, 3, 4], "steps": [9] * 4}) + "\n" for h in held]
        (seed / arm / "held_out.jsonl").write_text("".join(lines))
    assert plan(tmp_path, {"smollm2": preset}, [0])[0] == []  # both arms done

    summary = json.loads(json.dumps(summarize(tmp_path, {"smollm2": preset}, [0], [(("smollm2", "gigpo"),
                                                                                    ("smollm2", "sft"))])))  # fmt: skip
    control = summary["presets"]["smollm2"]["algos"]["sft"]
    assert control["warm_up"] == {"0": 0.25} and control["final"] == {"0": 0.5} and control["lift"] == {"0": 25.0}
    _, low, high = newcombe_paired([True, False, False, False], [True, True, False, False])
    assert control["lift_paired"] == {"0": pytest.approx([25.0, 100 * low, 100 * high, 4])}
    assert control["invalid_first_last"] == {}
    (c,) = summary["comparisons"]
    assert (c["a"], c["b"], c["seeds"]) == ("smollm2/gigpo", "smollm2/sft", {"0": 25.0})
