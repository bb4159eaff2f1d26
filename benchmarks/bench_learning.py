"""GiGPO vs GRPO: held-out success against env steps, several seeds, on KeyDoor and TextWorld.

    python -m benchmarks.bench_learning [--envs keydoor textworld] [--seeds 0 1 2] [--jobs 2]
        [--out runs/bench_learning] [--budget-scale 1.0]
    python -m benchmarks.bench_learning --seeds 0 1 --envs keydoor --budget-scale 0.1 \\
        --eval-every 1 --eval-episodes 16 --out /tmp/bench_smoke      # a smoke test, ~5 min

    python -m benchmarks.bench_learning --envs keydoor-hard keydoor-hard-defaults \
        --seeds 0 1 2 3 4 5 6 7 --out runs/bench_credit    # the credit-assignment comparison, ~60 min
    python -m benchmarks.bench_learning --envs coin5-solved --seeds 0 --out runs/bench_solved

The default (2 envs x 3 seeds: 6 warm-ups, 12 RL runs) takes about 50 minutes with
`--jobs 2` on 2 otherwise idle CPU cores (estimate from the costs in PRESETS; anything
else running on the machine stretches it). TextWorld games are generated once, first.
Paired comparisons (COMPARISONS) report the per-seed differences of final success, their
mean ± std and a Student's t 95 % interval.

Per env a preset (PRESETS: config file, extra flags, env-step budget, evaluation cadence).
For each (env, seed) the trainer's own SFT warm-up is saved once (benchmarks.bench_data's
`warm_up`); GiGPO and GRPO then both start RL from it with the same seed, hyperparameters
and env-step budget (`--max-env-steps`; a run stops at the end of the iteration that
spends it, so it overshoots by less than one iteration). Only `--algo` differs. Held-out
success is measured every `eval_every` iterations on the same held-out episodes; the
evaluation at iteration 0 is the warm-up's score, the one after the budget the final score.

Runs are `python -m algos.train` subprocesses, `--jobs` at a time, each with
OMP_NUM_THREADS=1 (one core each); their output goes to a .log beside the run. They live
in <out>/<preset>/s<seed>/<algo> (the warm-up in <out>/<preset>/s<seed>/warm). The same
command resumes a benchmark: a run whose metrics.jsonl holds its final evaluation is not
run again, and a cut run continues from its newest checkpoint (`algos.train --resume`;
each run checkpoints after every iteration and keeps the newest). A comparison larger
than one sitting is finished by calling it again; `--summary` writes the summary from the
runs finished so far and starts nothing. --out remembers the settings it was made with
and refuses others.

Writes <out>/summary.json, <out>/summary.md (the table, also printed) and <out>/curves.png.
Definitions: final = the last evaluation; mean +- sample std over seeds (ddof=1, n/a for one
seed); steps to X % = env steps at the first evaluation at or above X % (no interpolation
between evaluations, so the resolution is one evaluation interval; "never" if none);
GiGPO - GRPO = final success difference in points, per seed (same seed, same warm-up) and
its mean +- std. Curves hold each run's latest evaluation until its next one (a step
function), averaged over seeds on the union of their evaluation points.

Left out: significance tests (with 3 seeds, read the per-seed differences: an evaluation
of 64 episodes alone has a standard error of about 6 points at 50 %), wall-clock
comparisons (both algorithms cost the same per env step here), other algorithms (rloo).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ALGOS = ("gigpo", "grpo")
THRESHOLDS = (0.5, 0.8)


@dataclass(frozen=True)
class Preset:
    env: str
    config: str
    """A YAML preset of algos.train, relative to the repository root."""
    flags: tuple[str, ...]
    """More algos.train flags, for the warm-up and both algorithms."""
    budget: int
    """Env steps per RL run (--max-env-steps)."""
    eval_every: int
    """Held-out evaluation every N iterations (and after warm-up and at the end)."""
    eval_episodes: int
    iterations: int = 0
    """With it, a run also ends after this many iterations (--iterations); 0: the budget alone ends it."""
    sft_steps: int = 90
    """The warm-up's supervised steps (the trainer's default from a fresh model)."""
    algos: tuple[str, ...] = ALGOS
    """The RL runs per seed, all from the same warm-up; only --algo differs."""
    warm_from: str = ""
    """Another preset's key whose warm-ups this one starts from (same env and SFT settings), so that
    two presets compare RL settings from the very same weights."""


REPO = Path(__file__).resolve().parent.parent
COIN5 = ("--env-kwargs", "level", "5", "num_games", "32", "num_held_out", "32")  # coin collector level 5, 32 games
COIN3 = ("--env-kwargs", "level", "3", "num_games", "32", "num_held_out", "32")
PRESETS = {
    # The default job's config: ~1,300 env steps per iteration (dynamic sampling adds groups), 18 s
    # per iteration alone on 2 cores (README), SFT warm-up ~45 s. Measured with --jobs 2 (one thread
    # each) while a third process held a core: 44-55 s per iteration (train 31-37 s), an evaluation of
    # 32 episodes ~6 s; with a free core each that is ~30 s per iteration (~22 ms per env step).
    # 13,000 env steps = ~10 iterations: ~6 min per run with its 6 evaluations.
    "keydoor": Preset("KeyDoor-v0", "configs/default.yaml", (), budget=13_000, eval_every=2, eval_episodes=64),
    # configs/textworld_coin.yaml at level 7 (7-step routes; level 10 costs 65 s per iteration, level 3
    # is solved by the warm-up alone) with 4 groups of 8. Measured with one process on one core
    # (OMP_NUM_THREADS=1): SFT warm-up 5.5 min, held-out success after it 44 %; iterations 45-53 s at
    # 600-700 env steps (train ~38 s of it; ~75 ms per env step), 62 % after 2 iterations; an
    # evaluation of 32 episodes ~10 s. 4,000 env steps = ~6 iterations: ~6 min per run.
    # Games: 100 training + 32 held-out, generated once (~2.3 min on 2 cores).
    "textworld": Preset(
        "TextWorld-CoinCollector-v0",
        "configs/textworld_coin.yaml",
        ("--env-kwargs", "level", "7", "--num-groups", "4"),
        budget=4_000,
        eval_every=2,
        eval_episodes=32,
    ),
    # The credit-assignment env: KeyDoor-Hard-v0 (4x4 rooms with walls, a chain of two locks, distractors
    # and a key that fits nothing; expert routes of 11-26 steps, mean 17, within a 40-step limit), under
    # GiGPO as its authors run it (configs/gigpo_verl_agent.yaml). Cut to fit 8 seeds in about an hour
    # with --jobs 2: a 100-step SFT warm-up (300 steps took 11.5 min on a shared core), 6,000 env steps.
    "keydoor-hard": Preset(
        "KeyDoor-Hard-v0",
        "configs/gigpo_verl_agent.yaml",
        ("--env", "KeyDoor-Hard-v0"),
        budget=6_000,
        eval_every=2,
        eval_episodes=48,
        sft_steps=100,
    ),
    # The same env, warm-ups and budget under the default settings (configs/keydoor_hard.yaml), to set
    # against keydoor-hard (which settings should be the default).
    "keydoor-hard-defaults": Preset(
        "KeyDoor-Hard-v0",
        "configs/keydoor_hard.yaml",
        ("--target-kl", "0", "--sft-episodes", "200"),  # as before the KL early stop existed; the same warm-up
        budget=6_000,
        eval_every=2,
        eval_episodes=48,
        sft_steps=100,
        warm_from="keydoor-hard",
    ),
    # Little left to learn: coin collector level 5 (32 training games), whose warm-up already wins nearly
    # every held-out game. 8 iterations (~320 env steps each once solved) should keep held-out success
    # within 5 points of the warm-up and the invalid-action rate within 2 points.
    "coin5-solved": Preset(
        "TextWorld-CoinCollector-v0",
        "configs/textworld_coin.yaml",
        COIN5,
        budget=2_600,
        eval_every=4,
        eval_episodes=32,
    ),
    # No harm (issue 34): coin collector level 3 (3-step routes), 32 training and 32 held-out games, whose
    # warm-up should already win (nearly) every held-out game. 16 iterations of the default settings
    # should keep held-out success within 5 points of the warm-up, invalid actions within 2 points.
    "coin3-solved": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml", COIN3, budget=100_000,
                           iterations=16, eval_every=4, eval_episodes=32),  # fmt: skip
    # Chat against window context (issue 33): GiGPO alone, each context with its own warm-up of the same
    # settings (90 SFT steps on the same expert demonstrations, read as that context's prompts), the same
    # seed, hyperparameters and env-step budget. The window arm with memory 1 is the default job's
    # setting, so it shares the keydoor / coin5-solved warm-ups.
    "keydoor-window": Preset("KeyDoor-v0", "configs/default.yaml", (), budget=13_000, eval_every=2,
                             eval_episodes=64, algos=("gigpo",), warm_from="keydoor"),  # fmt: skip
    "keydoor-memory3": Preset("KeyDoor-v0", "configs/default.yaml", ("--memory", "3"), budget=13_000,
                              eval_every=2, eval_episodes=64, algos=("gigpo",)),  # fmt: skip
    "keydoor-chat": Preset("KeyDoor-v0", "configs/default.yaml", ("--context", "chat"), budget=13_000,
                           eval_every=2, eval_episodes=64, algos=("gigpo",)),  # fmt: skip
    "coin5-window": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml", COIN5, budget=2_600,
                           eval_every=4, eval_episodes=32, algos=("gigpo",), warm_from="coin5-solved"),  # fmt: skip
    "coin5-memory3": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml", (*COIN5, "--memory", "3"),
                            budget=2_600, eval_every=4, eval_episodes=32, algos=("gigpo",)),  # fmt: skip
    "coin5-chat": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml", (*COIN5, "--context", "chat"),
                         budget=2_600, eval_every=4, eval_episodes=32, algos=("gigpo",)),  # fmt: skip
    # Sokoban level 1 (5x5, one box, optimal plans of 6-15 moves, 30-step limit): a short run, to show
    # the env trains end to end; one seed is a demonstration, not a comparison.
    "sokoban": Preset("Sokoban-v0", "configs/sokoban.yaml", (), budget=3_000, eval_every=2, eval_episodes=32),
}
# (preset, algo) pairs whose final success is compared seed by seed: a - b, from the same warm-ups.
COMPARISONS = (
    (("keydoor", "gigpo"), ("keydoor", "grpo")),
    (("textworld", "gigpo"), ("textworld", "grpo")),
    (("keydoor-hard", "gigpo"), ("keydoor-hard", "grpo")),
    (("keydoor-hard-defaults", "gigpo"), ("keydoor-hard-defaults", "grpo")),
    (("keydoor-hard", "gigpo"), ("keydoor-hard-defaults", "gigpo")),
    (("keydoor-hard", "grpo"), ("keydoor-hard-defaults", "grpo")),
    (("coin5-solved", "gigpo"), ("coin5-solved", "grpo")),
    (("coin3-solved", "gigpo"), ("coin3-solved", "grpo")),
    (("sokoban", "gigpo"), ("sokoban", "grpo")),
    (("keydoor-chat", "gigpo"), ("keydoor-window", "gigpo")),
    (("keydoor-chat", "gigpo"), ("keydoor-memory3", "gigpo")),
    (("keydoor-memory3", "gigpo"), ("keydoor-window", "gigpo")),
    (("coin5-chat", "gigpo"), ("coin5-window", "gigpo")),
    (("coin5-chat", "gigpo"), ("coin5-memory3", "gigpo")),
    (("coin5-memory3", "gigpo"), ("coin5-window", "gigpo")),
)
# Two-sided 95 % quantiles of Student's t, by degrees of freedom (1-30); beyond, the normal's 1.96.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)  # fmt: skip

Curve = list[tuple[float, float]]  # (env steps, held-out success) per evaluation, in env-step order


# ---- summaries (pure) ----------------------------------------------------------------
def steps_to_reach(curve: Curve, threshold: float) -> float | None:
    """Env steps at the first evaluation at or above `threshold` (no interpolation); None if none."""
    return next((x for x, y in curve if y >= threshold), None)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; nan for fewer than two values)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def interval95(values: Sequence[float]) -> tuple[float, float]:
    """The t-based 95 % confidence interval of the mean (nan, nan for fewer than two values)."""
    mean, std = mean_std(values)
    if math.isnan(std):
        return math.nan, math.nan
    half = (T975[len(values) - 2] if len(values) - 1 <= len(T975) else 1.96) * std / math.sqrt(len(values))
    return mean - half, mean + half


def paired_differences(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    """a - b in points (x 100) for every seed both have."""
    return {seed: 100 * (a[seed] - b[seed]) for seed in sorted(a) if seed in b}


def band(curves: Sequence[Curve]) -> tuple[list[float], list[float], list[float]]:
    """(xs, mean, std) over runs of their step functions (each holds its latest evaluation, and its
    last one after it ends), on the union of their evaluation points. std as in mean_std."""
    xs = sorted({x for c in curves for x, _ in c})
    means, stds = [], []
    for x in xs:
        held = [next(y for cx, y in reversed(c) if cx <= x) for c in curves if c and c[0][0] <= x]
        m, s = mean_std(held)
        means.append(m)
        stds.append(s)
    return xs, means, stds


def is_finished(rows: Sequence[dict], budget: int, iterations: int = 0) -> bool:
    """Whether a run's metrics rows end with its final evaluation: an evaluation logged after the last
    iteration, which spent the budget or was iteration `iterations` (a periodic evaluation only follows
    an iteration that was neither)."""
    last = max((i for i, r in enumerate(rows) if r.get("data/env_steps_total") is not None), default=None)
    if last is None:
        return False
    row = rows[last]
    if row["data/env_steps_total"] < budget and not (iterations and row["iteration"] >= iterations):
        return False
    return any(r.get("eval/success_rate") is not None for r in rows[last + 1 :])


# ---- runs --------------------------------------------------------------------------
def scaled(preset: Preset, args: argparse.Namespace) -> Preset:
    """The preset under --budget-scale and the --eval-every / --eval-episodes / --sft-steps overrides."""
    return dataclasses.replace(
        preset,
        budget=max(1, round(preset.budget * args.budget_scale)),
        iterations=max(1, round(preset.iterations * args.budget_scale)) if preset.iterations else 0,
        eval_every=preset.eval_every if args.eval_every is None else args.eval_every,
        eval_episodes=preset.eval_episodes if args.eval_episodes is None else args.eval_episodes,
        sft_steps=preset.sft_steps if args.sft_steps is None else args.sft_steps,
    )


def read_rows(run: Path) -> list[dict]:
    from algos.run_dir import read_metrics

    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return read_metrics(run)


def warm_done(warm: Path) -> bool:
    from algos.run_dir import TRAINER_STATE

    return (warm / TRAINER_STATE).is_file()  # written last by warm_up


def train_command(p: Preset, warm: Path, seed: int, algo: str, run: Path) -> list[str]:
    """One RL run; only `algo` differs between the two of a seed. --iterations = the preset's iterations,
    else the budget, so that the env-step budget ends the run (every iteration collects at least one
    step) unless the preset caps its iterations. A checkpoint after
    every iteration (the newest one kept), so that a cut run resumes where it stopped."""
    return [sys.executable, "-m", "algos.train", "--config", str(REPO / p.config), *p.flags, "--model", str(warm),
            "--sft-steps", "0", "--seed", str(seed), "--algo", algo, "--iterations", str(p.iterations or p.budget),
            "--max-env-steps", str(p.budget), "--eval-every", str(p.eval_every),
            "--eval-episodes", str(p.eval_episodes), "--save-every", "1", "--keep-checkpoints", "1",
            "--device", "cpu", "--output-dir", str(run)]  # fmt: skip


def resumable(run: Path) -> bool:
    """Whether a cut run left a checkpoint to continue from (iter_0, the warm start's, is written first)."""
    from algos.run_dir import TRAINER_STATE

    return (run / "config.yaml").is_file() and any((run / "checkpoints").glob(f"iter_*/{TRAINER_STATE}"))


@dataclass
class Job:
    name: str
    cmd: list[str]
    log: Path
    after: str | None = None  # the job that must finish first
    before: Callable[[], None] | None = None  # clears what an interrupted attempt left


def run_jobs(jobs: list[Job], workers: int, done: set[str]) -> set[str]:
    """Run the jobs, `workers` at a time, in list order as their `after` jobs finish (or are in
    `done`); a failed job's dependents are skipped. Returns the names that failed or were skipped.
    Ctrl-C stops the running jobs (they start over on the next call) and starts no others."""
    pending, failed, running = list(jobs), set(), {}
    cond, stop = threading.Condition(), threading.Event()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def take() -> Job | None:  # called with cond held
        while pending and not stop.is_set():
            for job in pending:
                if job.after in failed:
                    pending.remove(job)
                    failed.add(job.name)
                    print(f"[skipped] {job.name} ({job.after} failed)", file=sys.stderr, flush=True)
                    break
                if job.after is None or job.after in done:
                    pending.remove(job)
                    return job
            else:
                cond.wait()
        return None

    def worker() -> None:
        while True:
            with cond:  # started under the lock, so a stop sees every process
                job = take()
                if job is None:
                    return
                if job.before:
                    job.before()
                job.log.parent.mkdir(parents=True, exist_ok=True)
                log = open(job.log, "w")  # noqa: SIM115 (closed below)
                running[job.name] = subprocess.Popen(job.cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            print(f"[start] {job.name}  (log: {job.log})", file=sys.stderr, flush=True)
            t0 = time.time()
            rc = running[job.name].wait()
            log.close()
            took = f"{(time.time() - t0) / 60:.1f} min"
            print(f"[{'done' if rc == 0 else f'FAILED rc={rc}'}] {job.name}  {took}", file=sys.stderr, flush=True)
            with cond:
                del running[job.name]
                (done if rc == 0 else failed).add(job.name)
                cond.notify_all()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, workers))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        stop.set()
        with cond:
            for proc in running.values():
                proc.terminate()
            cond.notify_all()
        raise
    return failed


def plan(out: Path, presets: dict[str, Preset], seeds: list[int]) -> tuple[list[Job], set[str]]:
    """(jobs still to run, names already done): per (env, seed) a warm-up, then one run per algorithm."""
    jobs, done = [], set()
    for seed in seeds:
        for key, p in presets.items():
            base = out / key / f"s{seed}"
            warm_key = p.warm_from or key
            warm, warm_name = out / warm_key / f"s{seed}" / "warm", f"{warm_key}/s{seed}/warm"
            todo = [algo for algo in p.algos if not is_finished(read_rows(base / algo), p.budget, p.iterations)]
            if not todo:
                continue  # every run of this seed is finished: no warm-up needed (none is kept in git)
            if warm_done(warm):
                done.add(warm_name)
            elif not any(j.name == warm_name for j in jobs):
                cmd = [sys.executable, "-m", "benchmarks.bench_learning", "--warm-up-only", "--envs", key,
                       "--seeds", str(seed), "--out", str(out), "--sft-steps", str(p.sft_steps)]  # fmt: skip
                jobs.append(Job(warm_name, cmd, warm.parent / "warm.log"))
            for algo in todo:
                run = base / algo
                if resumable(run):  # `algos.train --resume`: the run's own config, from its newest intact checkpoint
                    cmd, before = [sys.executable, "-m", "algos.train", "--resume", str(run)], None
                else:
                    cmd, before = train_command(p, warm, seed, algo, run), lambda run=run: shutil.rmtree(run, True)
                jobs.append(Job(f"{key}/s{seed}/{algo}", cmd, base / f"{algo}.log", after=warm_name, before=before))
    return jobs, done


def prepare(presets: dict[str, Preset]) -> None:
    """Make each env once (TextWorld generates its games now, not in two jobs at once) and the tiny model."""
    from agents.model import resolve_model
    from algos.cli import parse_config
    from algos.validate import check_env_make

    for p in presets.values():
        cfg = parse_config(["--config", str(REPO / p.config), *p.flags])
        check_env_make(cfg)
        resolve_model(cfg.model)


def check_settings(out: Path, presets: dict[str, Preset]) -> str | None:
    """Record the presets in <out>/settings.json; a message if --out holds runs made with other ones."""
    path = out / "settings.json"
    saved = json.loads(path.read_text()) if path.is_file() else {}
    defaults = {f.name: f.default for f in dataclasses.fields(Preset) if f.default is not dataclasses.MISSING}
    defaults = json.loads(json.dumps(defaults))  # a field added since a run was saved holds its default
    for key, p in presets.items():
        now = json.loads(json.dumps(dataclasses.asdict(p)))  # tuples as lists, as read back
        if key in saved and {**defaults, **saved[key]} != now:
            return f"{out} holds {key} runs made with {saved[key]}, not {now}; pass another --out"
        saved[key] = now
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=1))
    return None


# ---- report ------------------------------------------------------------------------
def summarize(out: Path, presets: dict[str, Preset], seeds: list[int]) -> dict:
    from scripts.plot import read_series

    summary = {}
    for key, p in presets.items():
        algos = {}
        for algo in p.algos:
            curves, invalid = {}, {}
            for seed in seeds:
                run = out / key / f"s{seed}" / algo
                if is_finished(read_rows(run), p.budget, p.iterations):
                    curves[seed] = list(zip(*read_series(run, "eval/success_rate", "data/env_steps_total")))
                    rate = read_series(run, "rollout/invalid_action_rate", "iteration")[1]
                    invalid[seed] = [rate[0], rate[-1]]  # the first and the last iteration's rollouts
            warm, final = {s: c[0][1] for s, c in curves.items()}, {s: c[-1][1] for s, c in curves.items()}
            xs, mean, std = band(list(curves.values()))
            algos[algo] = {
                "seeds": list(curves),
                "warm_up": warm,
                "warm_up_mean_std": _finite(mean_std(list(warm.values()))),
                "final": final,
                "final_mean_std": _finite(mean_std(list(final.values()))),
                "invalid_first_last": invalid,
                "invalid_first_last_mean": [_mean([v[0] for v in invalid.values()]),
                                            _mean([v[1] for v in invalid.values()])],  # fmt: skip
                "steps_to": {
                    f"{t:.0%}": {
                        "seeds": {s: steps_to_reach(c, t) for s, c in curves.items()},
                        "mean_curve": steps_to_reach(list(zip(xs, mean)), t),
                    }
                    for t in THRESHOLDS
                },
                "curves": {s: c for s, c in curves.items()},
                "band": {"x": xs, "mean": _finite(mean), "std": _finite(std)},
            }
        summary[key] = {"env": p.env, "preset": dataclasses.asdict(p), "algos": algos}
    return {"presets": summary, "comparisons": compare(summary)}


def compare(summary: dict) -> list[dict]:
    """COMPARISONS whose presets ran: per-seed final differences in points, mean +- std, 95 % interval."""
    out = []
    for (ka, aa), (kb, ab) in COMPARISONS:
        if aa not in summary.get(ka, {}).get("algos", {}) or ab not in summary.get(kb, {}).get("algos", {}):
            continue
        diff = paired_differences(summary[ka]["algos"][aa]["final"], summary[kb]["algos"][ab]["final"])
        out.append({"a": f"{ka}/{aa}", "b": f"{kb}/{ab}", "env": summary[ka]["env"], "seeds": diff,
                    "mean_std": _finite(mean_std(list(diff.values()))),
                    "interval95": _finite(interval95(list(diff.values())))})  # fmt: skip
    return out


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _finite(values: Sequence[float]) -> list[float | None]:
    """nan as None: JSON has no NaN."""
    return [None if math.isnan(v) else v for v in values]


def _mean_std(ms: Sequence[float | None], scale: float = 100, sign: str = "") -> str:
    mean, std = ms
    if mean is None:
        return "-"
    return f"{scale * mean:{sign}.1f}" + ("" if std is None else f" ± {scale * std:.1f}")


def _steps(x: float | None) -> str:
    return "never" if x is None else "0" if x == 0 else f"{x / 1000:.1f}k"


def table(summary: dict) -> str:
    presets = summary["presets"]
    lines = ["| preset | env | algo | seeds | warm-up (%) | final (%) | steps to 50 %: mean curve (per seed) "
             "| steps to 80 %: mean curve (per seed) | invalid actions, first → last iteration (%) |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for key, s in presets.items():
        for algo, a in s["algos"].items():
            reach = [f"{_steps(r['mean_curve'])} ({', '.join(_steps(v) for v in r['seeds'].values()) or '-'})"
                     for r in a["steps_to"].values()]  # fmt: skip
            first, last = a.get("invalid_first_last_mean", (None, None))
            invalid = "-" if first is None else f"{100 * first:.1f} → {100 * last:.1f}"
            lines.append(f"| {key} | {s['env']} | {algo} | {len(a['seeds'])} | {_mean_std(a['warm_up_mean_std'])} "
                         f"| {_mean_std(a['final_mean_std'])} | {' | '.join(reach)} | {invalid} |")  # fmt: skip
    lines += ["", "| a − b, final (points) | mean ± std | 95 % interval | per seed |", "|---|---|---|---|"]
    for c in summary["comparisons"]:
        per_seed = ", ".join(f"s{seed}: {v:+.1f}" for seed, v in c["seeds"].items()) or "-"
        lo, hi = c["interval95"]
        interval = "-" if lo is None else f"[{lo:+.1f}, {hi:+.1f}]"
        lines.append(f"| {c['a']} − {c['b']} | {_mean_std(c['mean_std'], 1, '+')} | {interval} | {per_seed} |")
    budgets = "; ".join(f"{key}: {s['preset']['budget']} env steps, held-out success on "
                        f"{s['preset']['eval_episodes']} episodes every {s['preset']['eval_every']} iterations"
                        for key, s in presets.items())  # fmt: skip
    lines += ["", f"Budgets: {budgets}. Mean ± sample std (ddof=1) over seeds; the interval is Student's t "
              "over the paired seeds; steps to X % = the first evaluation at or above it, not interpolated."]  # fmt: skip
    return "\n".join(lines)


def _held(end: float, xs: list, *ys: list) -> tuple[list, ...]:
    """A step curve with its last value drawn on to `end` (the panel's last evaluation)."""
    return [*xs, end], *([*y, y[-1]] for y in ys)


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    presets = summary["presets"]
    fig, axes = plt.subplots(1, len(presets), figsize=(6 * len(presets), 4.2), squeeze=False)
    for ax, (key, s) in zip(axes.flat, presets.items()):
        end = max((x for a in s["algos"].values() for x in a["band"]["x"][-1:]), default=0.0)

        for i, (algo, a) in enumerate(s["algos"].items()):
            color = f"C{i}"
            for c in a["curves"].values():
                ax.step(*_held(end, *map(list, zip(*c))), where="post", color=color, alpha=0.3, linewidth=0.8)
            xs, mean, std = a["band"]["x"], a["band"]["mean"], a["band"]["std"]
            if not xs:
                continue
            label = f"{algo} ({len(a['seeds'])} seeds)"
            ax.step(*_held(end, xs, mean), where="post", color=color, linewidth=2, label=label)
            if None not in std:  # one seed: no band
                lo, hi = [m - d for m, d in zip(mean, std)], [m + d for m, d in zip(mean, std)]
                ax.fill_between(*_held(end, xs, lo, hi), step="post", color=color, alpha=0.2, linewidth=0)
        for t in THRESHOLDS:
            ax.axhline(t, color="gray", linestyle=":", linewidth=1)
        ax.set_title(f"{key}: {s['env']} ({s['preset']['eval_episodes']} held-out episodes)", fontsize=9)
        ax.set_xlabel("env steps")
        ax.set_ylabel("held-out success (mean ± std over seeds)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a preset with no finished run yet has no curve
            ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- main --------------------------------------------------------------------------
def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_learning", description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=["keydoor", "textworld"], choices=list(PRESETS),
                   help="presets to run (keys of PRESETS); keydoor-hard and keydoor-hard-defaults share warm-ups")  # fmt: skip
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--jobs", type=int, default=2, help="training processes at once (one core each)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_learning"))
    p.add_argument("--budget-scale", type=float, default=1.0, help="multiplies every preset's env-step budget")
    p.add_argument("--eval-every", type=int, help="override the presets' evaluation cadence (iterations)")
    p.add_argument("--eval-episodes", type=int, help="override the presets' held-out episodes")
    p.add_argument("--sft-steps", type=int, help="override the warm-up's SFT steps (90)")
    p.add_argument("--warm-up-only", action="store_true", help="make the warm-up checkpoints, in this process")
    p.add_argument("--summary", action="store_true",
                   help="write the summary from the runs that have finished; start none")  # fmt: skip
    args = p.parse_args(argv)
    if args.budget_scale <= 0:
        p.error("--budget-scale must be > 0")
    presets = {key: scaled(PRESETS[key], args) for key in args.envs}

    if args.warm_up_only:  # what each warm-up job runs
        from benchmarks.bench_data import warm_up

        for seed in args.seeds:
            for key, pr in presets.items():
                base = args.out / (pr.warm_from or key) / f"s{seed}"
                if not warm_done(base / "warm"):
                    shutil.rmtree(base / "warm", ignore_errors=True)  # an interrupted save
                    warm_up(pr.env, base, seed, pr.sft_steps, ["--config", str(REPO / pr.config), *pr.flags])
        return 0

    problem = check_settings(args.out, presets)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    jobs, done = plan(args.out, presets, args.seeds)
    failed = set()
    signal.signal(signal.SIGTERM, _interrupted)  # `kill` stops the training processes too, as Ctrl-C does
    if jobs and args.summary:
        print(f"{len(jobs)} jobs not done; the summary holds the finished runs only", file=sys.stderr)
    elif jobs:
        prepare(presets)
        print(f"{len(jobs)} jobs, {args.jobs} at a time; {len(done)} warm-ups already there", file=sys.stderr)
        try:
            failed = run_jobs(jobs, args.jobs, done)
        except KeyboardInterrupt:
            print("interrupted: the running jobs were stopped; the same command resumes", file=sys.stderr)
            return 130

    summary = summarize(args.out, presets, args.seeds)
    markdown = table(summary)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    (args.out / "summary.md").write_text(markdown + "\n")
    plot(summary, args.out / "curves.png")
    print(markdown)
    print(f"\n{args.out}/summary.json, summary.md, curves.png", file=sys.stderr)
    if failed:
        print(f"error: {len(failed)} jobs failed or were skipped: {', '.join(sorted(failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
