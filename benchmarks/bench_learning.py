"""GiGPO vs GRPO: held-out success against env steps, several seeds, on KeyDoor and TextWorld.

    python -m benchmarks.bench_learning [--envs keydoor textworld] [--seeds 0 1 2] [--jobs 2]
        [--out runs/bench_learning] [--budget-scale 1.0]
    python -m benchmarks.bench_learning --seeds 0 1 --envs keydoor --budget-scale 0.1 \\
        --eval-every 1 --eval-episodes 16 --out /tmp/bench_smoke      # a smoke test, ~5 min

    python -m benchmarks.bench_learning --envs keydoor-hard keydoor-hard-defaults \
        --seeds 0 1 2 3 4 5 6 7 --out runs/bench_credit    # the credit-assignment comparison, ~60 min
    python -m benchmarks.bench_learning --envs coin5-solved --seeds 0 --out runs/bench_solved
    python -m benchmarks.bench_learning --envs keydoor-26k --seeds 0 1 2 3 4 5 6 7 --jobs 1 \
        --out runs/bench_gigpo    # the keydoor runs (made first if missing) continued to 26,000 env steps
    python -m benchmarks.bench_learning --envs keydoor-lr5e-4 --seeds 0 1 2 --out runs/bench_gigpo
        # one of the default job's ablations (learning_presets.ABLATIONS), from the keydoor warm-ups
    python -m benchmarks.bench_learning --envs smollm2 --seeds 0 1 2 3 4 --algos gigpo --jobs 1 --threads 2 \
        --out runs/real-smollm2 --pack studies/real-smollm2
        # the real-model study (SmolLM2-135M-Instruct, docs/benchmarks.md "Does RL teach a real model?"): about
        # 2 h per seed on 2 AVX2 cores; resumes where it was cut, and packs what has finished for git

The default (2 envs x 3 seeds: 6 warm-ups, 12 RL runs) takes about 50 minutes with
`--jobs 2` on 2 otherwise idle CPU cores (estimate from the costs in PRESETS; anything
else running on the machine stretches it). TextWorld games are generated once, first.
Paired comparisons (COMPARISONS) report the per-seed differences of final success, their
mean ± std and a Student's t 95 % interval.

Per env a preset (PRESETS in benchmarks/learning_presets.py: config file, extra flags, env-step
budget, evaluation cadence). For each (env, seed) the trainer's own SFT warm-up is saved once
(benchmarks.bench_data's `warm_up`); GiGPO and GRPO then both start RL from it with the
same seed, hyperparameters and env-step budget (`--max-env-steps`; a run stops at the end of
the iteration that spends it, so it overshoots by less than one iteration). Only `--algo`
differs. Held-out
success is measured every `eval_every` iterations on the same held-out episodes; the
evaluation at iteration 0 is the warm-up's score, the one after the budget the final score.

Runs are `python -m algos.train` subprocesses, `--jobs` at a time, each with
OMP_NUM_THREADS=--threads (1: one core each); their output goes to a .log beside the run. They live
in <out>/<preset>/s<seed>/<algo> (the warm-up in <out>/<preset>/s<seed>/warm). The same
command resumes a benchmark: a run whose metrics.jsonl holds its final evaluation is not
run again, and a cut run continues from its newest checkpoint (`algos.train --resume`;
each run checkpoints after every iteration and keeps the newest). A comparison larger
than one sitting is finished by calling it again; `--summary` writes the summary from the
runs finished so far and starts nothing. --out remembers the settings it was made with
and refuses others.

Writes <out>/summary.json, <out>/summary.md (the table, also printed) and <out>/curves.png
(benchmarks/learning_report.py, which defines what they hold).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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

from benchmarks.evidence import ATTEMPTS, pack, unpack
from benchmarks.learning_presets import ARMS, COMPARISONS, PRESETS, SFT, Preset
from benchmarks.learning_report import arm_finished, is_finished, plot, read_rows, summarize, table

REPO = Path(__file__).resolve().parent.parent
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


def warm_done(warm: Path) -> bool:
    from algos.run_dir import TRAINER_STATE

    return (warm / TRAINER_STATE).is_file()  # written last by warm_up


def train_command(p: Preset, warm: Path, seed: int, algo: str, run: Path) -> list[str]:
    """One RL run; only `algo` differs between the two of a seed. --iterations = the preset's iterations,
    else the budget, so that the env-step budget ends the run (every iteration collects at least one
    step) unless the preset caps its iterations. A checkpoint after
    every iteration (the newest one kept), so that a cut run resumes where it stopped. The `sft` arm:
    the preset's warm-up made again from the config's model and continued for control_steps more steps, then
    evaluated on the same held-out tasks (`--iterations 0`)."""
    if algo == SFT:
        return [sys.executable, "-m", "algos.train", "--config", str(REPO / p.config), *p.flags,
                "--sft-steps", str(p.sft_steps + p.control_steps), "--seed", str(seed), "--iterations", "0",
                "--eval-episodes", str(p.eval_episodes), "--device", "cpu", "--output-dir", str(run)]  # fmt: skip
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
    attempts: Path | None = None  # where each attempt's row goes: when, how long, how it ended, on what machine


def machine() -> dict:
    """The CPU a job ran on: its model, cores and the flags that decide its matmul speed."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    fields = {}
    for line in info.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first CPU's
    flags = set(fields.get("flags", "").split())
    return {"cpu": fields.get("model name", ""), "cores": os.cpu_count(),
            "flags": [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in flags]}  # fmt: skip


def record_attempt(job: Job, started: float, rc: int, threads: int, workers: int) -> None:
    if job.attempts is None:
        return
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    row = {"started": when, "seconds": round(time.time() - started, 1), "rc": rc, "threads": threads, "jobs": workers,
           "machine": machine()}  # fmt: skip
    with open(job.attempts, "a") as f:
        f.write(json.dumps(row) + "\n")


def run_jobs(jobs: list[Job], workers: int, done: set[str], threads: int = 1) -> set[str]:
    """Run the jobs, `workers` at a time with `threads` OMP threads each, in list order as their `after`
    jobs finish (or are in `done`); a failed job's dependents are skipped. Returns the names that failed
    or were skipped. Ctrl-C stops the running jobs (they start over on the next call) and starts no others."""
    pending, failed, running = list(jobs), set(), {}
    cond, stop = threading.Condition(), threading.Event()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}

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
            record_attempt(job, t0, rc, threads, workers)
            took = f"{(time.time() - t0) / 60:.1f} min"
            print(f"[{'done' if rc == 0 else f'FAILED rc={rc}'}] {job.name}  {took}", file=sys.stderr, flush=True)
            with cond:
                del running[job.name]
                (done if rc == 0 else failed).add(job.name)
                cond.notify_all()

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, workers))]
    for t in pool:
        t.start()
    try:
        for t in pool:
            t.join()
    except KeyboardInterrupt:
        stop.set()
        with cond:
            for proc in running.values():
                proc.terminate()
            cond.notify_all()
        raise
    return failed


def plan(out: Path, presets: dict[str, Preset], seeds: list[int], algos: Sequence[str] = ARMS) -> tuple[list[Job], set[str]]:
    """(jobs still to run, names already done): per (env, seed) a warm-up, then one run per algorithm
    of the preset's that is in `algos`."""
    jobs, done = [], set()
    for seed in seeds:
        for key, p in presets.items():
            base = out / key / f"s{seed}"
            warm_key = p.warm_from or key
            warm, warm_name = out / warm_key / f"s{seed}" / "warm", f"{warm_key}/s{seed}/warm"
            todo = [algo for algo in p.algos
                    if algo in algos and not arm_finished(read_rows(base / algo), p, algo)]  # fmt: skip
            if not todo:
                continue  # every run of this seed is finished: no warm-up needed (none is kept in git)
            if p.extends:
                jobs += extension_jobs(out, presets, p, key, seed, todo, done)
                continue
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
                jobs.append(Job(f"{key}/s{seed}/{algo}", cmd, base / f"{algo}.log", after=warm_name, before=before,
                                attempts=base / f"{algo}.{ATTEMPTS}"))  # fmt: skip
    return jobs, done


def extension_jobs(out: Path, presets: dict[str, Preset], p: Preset, key: str, seed: int, todo: list[str],
                   done: set[str]) -> list[Job]:
    """The runs of an `extends` preset still to do: each continues its source run (which `presets` also
    holds, so it is planned or finished) from a copy of it, or, if cut, from its own newest checkpoint.
    Adds the finished source runs to `done`."""
    source, jobs = presets[p.extends], []
    for algo in todo:
        src, run = out / p.extends / f"s{seed}" / algo, out / key / f"s{seed}" / algo
        src_name = f"{p.extends}/s{seed}/{algo}"
        if is_finished(read_rows(src), source.budget, source.iterations):
            done.add(src_name)
        cmd = [sys.executable, "-m", "algos.train", "--resume", str(run), "--max-env-steps", str(p.budget),
               "--iterations", str(p.iterations or p.budget)]  # fmt: skip
        before = None if resumable(run) else lambda src=src, run=run: copy_run(src, run)
        jobs.append(Job(f"{key}/s{seed}/{algo}", cmd, run.parent / f"{algo}.log", after=src_name, before=before))
    return jobs


def copy_run(src: Path, run: Path) -> None:
    """`run` as a copy of the finished run `src`, put in place whole (a cut copy is a folder that
    `resumable` does not take, and the next call copies again)."""
    part = run.with_name(run.name + ".copying")
    for path in (run, part):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(src, part)
    part.rename(run)


def with_sources(keys: list[str]) -> list[str]:
    """The presets to run: `keys` and, before them, the presets that those extend."""
    out = []
    for key in keys:
        source = PRESETS[key].extends
        out += [k for k in (source, key) if k and k not in out]
    return out


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


# ---- main --------------------------------------------------------------------------
def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_learning", description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=["keydoor", "textworld"], choices=list(PRESETS),
                   help="presets to run (keys of PRESETS); keydoor-hard and keydoor-hard-defaults share warm-ups")  # fmt: skip
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--algos", nargs="+", choices=ARMS, default=list(ARMS),
                   help="run only these of each preset's algorithms (the summary holds whatever finished)")  # fmt: skip
    p.add_argument("--jobs", type=int, default=2, help="training processes at once")
    p.add_argument("--threads", type=int, default=1, help="OMP threads per process (jobs x threads <= cores)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_learning"))
    p.add_argument("--budget-scale", type=float, default=1.0, help="multiplies every preset's env-step budget")
    p.add_argument("--eval-every", type=int, help="override the presets' evaluation cadence (iterations)")
    p.add_argument("--eval-episodes", type=int, help="override the presets' held-out episodes")
    p.add_argument("--sft-steps", type=int, help="override the warm-up's SFT steps (90)")
    p.add_argument("--warm-up-only", action="store_true", help="make the warm-up checkpoints, in this process")
    p.add_argument("--summary", action="store_true",
                   help="write the summary from the runs that have finished; start none")  # fmt: skip
    p.add_argument("--pack", type=Path, metavar="DIR",
                   help="also write the study's evidence to DIR (benchmarks/evidence.py) and its summary")  # fmt: skip
    p.add_argument("--unpack", type=Path, metavar="DIR",
                   help="first write DIR/runs.json.xz's runs into --out (those not there yet)")  # fmt: skip
    args = p.parse_args(argv)
    if args.budget_scale <= 0:
        p.error("--budget-scale must be > 0")
    if args.jobs < 1 or args.threads < 1:
        p.error("--jobs and --threads must be >= 1")
    presets = {key: scaled(PRESETS[key], args) for key in with_sources(args.envs)}

    if args.warm_up_only:  # what each warm-up job runs
        from benchmarks.bench_data import warm_up

        for seed in args.seeds:
            for key, pr in presets.items():
                if pr.extends:
                    continue  # continues its source's runs: no warm-up of its own
                base = args.out / (pr.warm_from or key) / f"s{seed}"
                if not warm_done(base / "warm"):
                    shutil.rmtree(base / "warm", ignore_errors=True)  # an interrupted save
                    warm_up(pr.env, base, seed, pr.sft_steps, ["--config", str(REPO / pr.config), *pr.flags])
        return 0

    if args.unpack:
        if not (args.unpack / "runs.json.xz").is_file():
            print(f"error: --unpack {args.unpack}: no runs.json.xz there", file=sys.stderr)
            return 2
        print(f"unpacked {len(unpack(args.unpack, args.out))} runs into {args.out}", file=sys.stderr)
    problem = check_settings(args.out, presets)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    jobs, done = plan(args.out, presets, args.seeds, args.algos)
    failed = set()
    signal.signal(signal.SIGTERM, _interrupted)  # `kill` stops the training processes too, as Ctrl-C does
    if jobs and args.summary:
        print(f"{len(jobs)} jobs not done; the summary holds the finished runs only", file=sys.stderr)
    elif jobs:
        prepare(presets)
        print(f"{len(jobs)} jobs, {args.jobs} at a time with {args.threads} threads each; {len(done)} warm-ups "
              "already there", file=sys.stderr)
        try:
            failed = run_jobs(jobs, args.jobs, done, args.threads)
        except KeyboardInterrupt:
            print("interrupted: the running jobs were stopped; the same command resumes", file=sys.stderr)
            return 130

    summary = summarize(args.out, presets, args.seeds, COMPARISONS)
    markdown = table(summary)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    (args.out / "summary.md").write_text(markdown + "\n")
    plot(summary, args.out / "curves.png")
    print(markdown)
    if args.pack:
        names = [f"{key}/s{seed}/{algo}" for key, pr in presets.items() for seed in args.seeds for algo in pr.algos]
        data = pack(args.out, names, args.pack)
        for name in ("summary.json", "summary.md", "curves.png"):
            shutil.copyfile(args.out / name, args.pack / name)
        print(f"packed {len(data['runs'])} runs into {args.pack}/runs.json.xz", file=sys.stderr)
    print(f"\n{args.out}/summary.json, summary.md, curves.png", file=sys.stderr)
    if failed:
        print(f"error: {len(failed)} jobs failed or were skipped: {', '.join(sorted(failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
