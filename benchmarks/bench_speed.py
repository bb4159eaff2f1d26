"""Speed, measured side by side in one run: against the hardware, against TRL, and GiGPO's cost.

    python -m benchmarks.bench_speed                          # every part
    python -m benchmarks.bench_speed --parts hardware gigpo   # without TRL (needs `pip install -e .[bench]`)

hardware  The default job (KeyDoor-v0, GiGPO, 8 x 8 rollouts, SFT warm-up first) runs
          `--iterations` iterations in this process while every generate call and every
          optimizer step is recorded. The same tokens are then replayed through the same model
          with nothing else around them: generation as a KV-cached forward loop over the
          recorded batches, teacher-forcing the sampled tokens (the model work of sampling them,
          without sampling, bookkeeping or env), and the update as forward + backward + AdamW
          step over the same micro-batches, collated beforehand (an iteration whose update was
          skipped or held replays its generation only; the replay's trained-on tokens and optimizer
          steps are checked against the run's metrics). The ratio is an iteration's
          wall time (`time/wall_s`: everything, logging included) over the sum of the two; the
          breakdown comes from the iteration's own `time/*` tags.
trl       Completions per second of this trainer and of TRL's GRPOTrainer on one single-turn
          workload (Arithmetic-v0; same warm start, prompts, group size, batch, max new tokens,
          temperature, loss type), over work recorded on both sides and checked equal (completions,
          generated and trained-on tokens, optimizer steps): benchmarks/trl_compare.py. `--trl-flags
          --model smollm2-135m-instruct` runs it on the real model.
gigpo     `compute_advantages` (the trainer's call: rows from Step records, anchor grouping,
          GiGPO advantages, anchor statistics) on 10^4, 10^5 and 10^6 synthetic steps shaped like
          KeyDoor's (groups of 8 trajectories of 1-19 steps, lockstep order, str state keys), and
          its share of a default iteration.
warmup    The default job's SFT warm-up step (its demonstrations, batches of 64), with the shared
          layout of algos/logprobs.py (distinct prompts after the opening they share, which runs once)
          and with every prompt run whole: the same batches, the two alternating in rounds from the same
          weights; seconds per step, their ratio, and the losses, which must agree to float rounding.

Prints the tables and writes them to --out (default runs/bench_speed/summary.json). The first
measured iteration is the second one: the first pays for one-time warm-ups (allocator, kernels).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks.trl_compare import UnequalWork  # the one error of a comparison whose sides did different work

PARTS = ("hardware", "trl", "gigpo", "warmup")


# ---- hardware: an iteration against its own pure compute -------------------------------


@contextmanager
def recording():
    """Record every HF generate call and every learner optimizer step, in order; the real methods
    run unchanged. Entries: ("generate", prompts, responses, batch_size), ("step", samples) and
    ("log",) when an iteration's metrics line is written (one per iteration, whether or not it updated)."""
    from agents.backend import HFBackend
    from algos.learner import Learner
    from algos.run import Run

    calls: list[tuple] = []
    generate, step, log = HFBackend.generate, Learner._step, Run.log

    def recorded_generate(self, prompts, sampling):
        out = generate(self, prompts, sampling)
        calls.append(("generate", [list(p) for p in prompts], out[0], self.batch_size))
        return out

    def recorded_step(self, mini):
        calls.append(("step", list(mini)))
        return step(self, mini)

    def recorded_log(self, *args, **kwargs):
        out = log(self, *args, **kwargs)
        calls.append(("log",))
        return out

    HFBackend.generate, Learner._step, Run.log = recorded_generate, recorded_step, recorded_log
    try:
        yield calls
    finally:
        HFBackend.generate, Learner._step, Run.log = generate, step, log


def by_iteration(calls: list[tuple]) -> list[list[tuple]]:
    """The recorded calls cut at each iteration's log: entry k holds iteration k+1's calls (the SFT
    warm-up's and evaluation's generate calls fall into the iteration whose wall time holds them)."""
    out, current = [], []
    for call in calls:
        if call[0] == "log":
            out.append(current)
            current = []
        else:
            current.append(call)
    return out


def replayed_work(calls: list[tuple]) -> dict[str, int]:
    """What an iteration's recorded calls hold: generated tokens, response tokens through forward and
    backward, backward passes (optimizer steps, a KL-stopped one included)."""
    return {"generated_tokens": sum(len(r) for c in calls if c[0] == "generate" for r in c[2]),
            "backward_tokens": sum(len(s.response_ids) for c in calls if c[0] == "step" for s in c[1]),
            "optimizer_steps": sum(c[0] == "step" for c in calls)}  # fmt: skip


def logged_work(row: dict) -> dict[str, int]:
    """The same, as the run logged it (an iteration without an update logs no train/ keys)."""
    return {"backward_tokens": round(row.get("train/backward_tokens", 0.0)),
            "optimizer_steps": round(row.get("train/optimizer_steps", 0.0) + row.get("train/early_stopped", 0.0))}  # fmt: skip


def check_replay(row: dict, work: dict[str, int]) -> None:
    """The replay trains on exactly what the run trained on, or UnequalWork."""
    logged = logged_work(row)
    if any(logged[k] != work[k] for k in logged):
        raise UnequalWork(f"iteration {row['iteration']}: the run logged {logged}, the replay holds "
                          f"{ {k: work[k] for k in logged} }")  # fmt: skip


def pure_generation(model, calls: list[tuple], pad_id: int) -> float:
    """Seconds to run the model over the recorded generate calls: in the backend's batches, its
    prefill (equal prompts once) and one cached forward per further token (its `decode`), feeding
    the tokens that were sampled."""
    import torch

    from agents.backend import HFBackend

    batches = []
    for _, prompts, responses, batch_size in (c for c in calls if c[0] == "generate"):
        backend = HFBackend(model, [], pad_id, batch_size)
        for chunk in backend.batches(prompts):
            steps = max(len(responses[i]) for i in chunk)
            forced = torch.full((len(chunk), max(steps, 1)), pad_id, dtype=torch.long)
            for row, i in enumerate(chunk):
                forced[row, : len(responses[i])] = torch.tensor(responses[i], dtype=torch.long)
            batches.append((backend, [prompts[i] for i in chunk], forced, steps))
    model.eval()
    start = time.perf_counter()
    with torch.no_grad():
        for backend, prompts, forced, steps in batches:
            _, cache, mask, positions = backend.prefill(prompts)
            for t in range(steps - 1):  # the backend's loop: one forward per sampled token after the first
                _, cache, mask, positions = backend.decode(forced[:, t], cache, mask, positions)
    return time.perf_counter() - start


def pure_update(model, calls: list[tuple], pad_id: int, micro_batch_size: int, temperature: float,
                share_prompts: bool = True) -> float:  # fmt: skip
    """Seconds of forward + backward + AdamW step over the recorded optimizer steps' micro-batches,
    split and collated as the learner does (beforehand): with `share_prompts`, equal prompts side by
    side and run once; without, every sample's prompt runs (the work without that saving)."""
    import torch

    from algos.logprobs import batch_order, collate, response_logprobs

    steps = []
    for _, mini in (c for c in calls if c[0] == "step"):
        mini = batch_order(mini, share_prompts)
        chunks = [mini[i : i + micro_batch_size] for i in range(0, len(mini), micro_batch_size)]
        steps.append([collate(c, pad_id, model.device, share_prompts) for c in chunks])
    if not steps:  # an iteration whose update was skipped or held
        return 0.0
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    start = time.perf_counter()
    for batches in steps:
        optimizer.zero_grad(set_to_none=True)
        tokens = sum(float(b["mask"].sum()) for b in batches)
        for batch in batches:
            logp, _ = response_logprobs(model, batch, temperature)
            (-(logp * batch["mask"]).sum() / tokens).backward()
        optimizer.step()
    return time.perf_counter() - start


def hardware(iterations: int, out: Path, model: str | None, flags: list[str] | None = None) -> dict:
    import torch

    from agents.model import load_model, load_tokenizer
    from algos.cli import parse_config
    from algos.run import TIME_SECTIONS
    from algos.run_dir import read_metrics
    from algos.train import train
    from algos.validate import validate

    base = ["--iterations", str(iterations), "--eval-episodes", "0", "--output-dir", str(out / "hardware-run"),
            "--overwrite"]  # fmt: skip
    cfg = parse_config([*base, *(["--model", model] if model else []), *(flags or [])])
    validate(cfg)
    with recording() as calls:
        run = train(cfg)
    rows = read_metrics(run.path)
    rows = [r for r in rows if "time/wall_s" in r]
    final = max(run.path.glob("checkpoints/iter_*"), key=lambda p: int(p.name.split("_")[1]))
    tokenizer = load_tokenizer(str(final))
    replay = load_model(str(final), "cpu", torch.float32)  # the same architecture; the weights do not change the work
    iterations = by_iteration(calls)
    if len(rows) != len(iterations):
        raise UnequalWork(f"{len(rows)} metrics lines but {len(iterations)} iterations recorded")
    per_iteration = []
    temperature = cfg.sampling.temperature or 1.0
    for row, its_calls in list(zip(rows, iterations))[1:]:  # the first iteration pays one-time costs
        work = replayed_work(its_calls)
        check_replay(row, work)
        gen = pure_generation(replay, its_calls, tokenizer.pad_token_id)
        upd = pure_update(replay, its_calls, tokenizer.pad_token_id, cfg.learner.micro_batch_size, temperature)
        unshared = pure_update(replay, its_calls, tokenizer.pad_token_id, cfg.learner.micro_batch_size, temperature,
                               share_prompts=False)  # fmt: skip
        per_iteration.append({"iteration": row["iteration"], "wall_s": row["time/wall_s"], "pure_generation_s": gen,
                              "pure_update_s": upd, "pure_update_unshared_s": unshared,
                              "ratio": row["time/wall_s"] / (gen + upd),
                              "update_skipped": row.get("train/update_skipped", 0.0), **work,
                              "env_steps": sum(len(c[1]) for c in its_calls if c[0] == "generate"),
                              **{k: row[f"time/{k}_s"] for k in TIME_SECTIONS}})  # fmt: skip
    if not per_iteration:
        raise UnequalWork(f"no iteration after the first to measure: the run logged {len(rows)} metrics "
                          "lines (--max-env-steps?)")  # fmt: skip
    mean = {k: sum(p[k] for p in per_iteration) / len(per_iteration) for k in per_iteration[0]}
    mean["ratio"] = mean["wall_s"] / (mean["pure_generation_s"] + mean["pure_update_s"])
    return {"iterations": per_iteration, "mean": mean, "peak_rss_gib": rows[-1].get("memory/peak_rss_gib")}


def print_hardware(result: dict) -> None:
    m = result["mean"]
    print(f"\n== hardware: default job, mean of iterations {', '.join(str(p['iteration']) for p in result['iterations'])}")
    print(f"{'iteration wall time':<44}{m['wall_s']:8.2f} s")
    print(f"{'pure generation (same tokens, same batches)':<44}{m['pure_generation_s']:8.2f} s")
    print(f"{'pure forward + backward + step':<44}{m['pure_update_s']:8.2f} s")
    print(f"{'ratio wall / (generation + update)':<44}{m['ratio']:8.3f}   (target <= 1.15)")
    print(f"{'  (update without shared prompts':<44}{m['pure_update_unshared_s']:8.2f} s)")
    print(f"per iteration: {[round(p['ratio'], 3) for p in result['iterations']]}")
    skipped = sum(p["update_skipped"] for p in result["iterations"])
    print(f"work per iteration (the run's and the replay's, checked equal): {m['generated_tokens']:.0f} generated "
          f"tokens, {m['backward_tokens']:.0f} trained on in {m['optimizer_steps']:.1f} optimizer steps; "
          f"{skipped:.0f} of {len(result['iterations'])} updates skipped (no informative group)")  # fmt: skip
    rollout_rest = m["rollout"] - m["env"] - m["prompt"] - m["generate"] - m["parse"]
    rest = m["wall_s"] - m["rollout"] - m["advantage"] - m["train"] - m["sync"] - m["log"]
    parts = [("env (reset, step)", m["env"]), ("prompt building (template, tokenize)", m["prompt"]),
             ("generation (backend)", m["generate"]), ("parsing (decode, parse)", m["parse"]),
             ("rollout bookkeeping (data layer, Steps)", rollout_rest), ("advantages", m["advantage"]),
             ("update (learner)", m["train"]), ("weight sync", m["sync"]), ("logging", m["log"]),
             ("rest (samples, metrics, final log line)", rest)]  # fmt: skip
    print(f"{'breakdown':<44}{'s':>8}{'share':>8}")
    for name, v in parts:
        print(f"  {name:<42}{v:8.3f}{v / m['wall_s']:8.1%}")
    update = f"{m['train'] / m['pure_update_s']:.3f}x" if m["pure_update_s"] > 0 else "none (no update ran)"
    print(f"generation overhead over pure: {m['generate'] / m['pure_generation_s']:.3f}x; "
          f"update overhead over pure: {update}; peak RSS {result['peak_rss_gib']:.2f} GiB")  # fmt: skip


# ---- gigpo: grouping + advantages at scale ---------------------------------------------


def synthetic_steps(n: int, seed: int = 0) -> list:
    """About n Step records shaped like KeyDoor's: groups of 8 trajectories of 1-19 steps in
    lockstep order, state keys from a few dozen states per group, reward 1 at some episodes' end."""
    from algos.collector import Step

    rng = random.Random(seed)
    rows, traj, group = [], 0, 0
    while len(rows) < n:
        lengths = [rng.randint(1, 19) for _ in range(8)]
        wins = [rng.random() < 0.5 for _ in range(8)]
        trajs = []
        for length, won in zip(lengths, wins):
            keys = [f"room{rng.randrange(6)}|key:{rng.random() < 0.5}|door:locked" for _ in range(length)]
            trajs.append((traj, length, won, keys))
            traj += 1
        for t in range(max(lengths)):  # lockstep: time step t of every running trajectory
            for tid, length, won, keys in trajs:
                if t < length:
                    last = t == length - 1
                    rows.append(Step(group, tid, t, keys[t], "", [], [], [], "", "", "ok", rng.random() < 0.9,
                                     float(won and last), won and last, not won and last, won))  # fmt: skip
        group += 1
    return rows[:n]


def gigpo_scaling(sizes: list[int], repeats: int) -> list[dict]:
    from algos.config import Config
    from algos.credit import compute_advantages

    cfg = Config()  # the default job: gigpo, mean_std, state keys
    out = []
    for n in sizes:
        steps = synthetic_steps(n)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            compute_advantages(cfg.algo, cfg.advantages, steps)
            times.append(time.perf_counter() - start)
        out.append({"steps": n, "seconds": min(times), "us_per_step": min(times) / n * 1e6})
        del steps
    return out


def print_gigpo(result: list[dict], iteration: dict | None) -> None:
    print("\n== gigpo: compute_advantages (grouping + advantages), best of the repeats")
    print(f"{'steps':>10}{'seconds':>10}{'us/step':>10}")
    for r in result:
        print(f"{r['steps']:>10}{r['seconds']:>10.4f}{r['us_per_step']:>10.3f}")
    if iteration:
        print(f"in a default iteration: {iteration['advantage']:.4f} s of {iteration['wall_s']:.2f} s "
              f"= {iteration['advantage'] / iteration['wall_s']:.4%} (target <= 0.1 %)")  # fmt: skip


# ---- warmup: the SFT step with and without the shared opening --------------------------


def warmup_step(steps: int, rounds: int, flags: list[str]) -> dict:
    """Seconds per SFT step of the default job's warm-up, shared layout against full prompts: `rounds`
    alternating rounds of `steps` steps each, every round from the same weights on the same batches."""
    import copy
    from dataclasses import replace

    from algos.cli import parse_config
    from algos.learner import Learner
    from algos.run import Run
    from algos.sft import demos_from_config, warm_up

    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config(["--output-dir", str(Path(tmp) / "run"), "--sft-steps", "0", "--eval-episodes", "0", *flags])
        with Run(cfg) as run:
            cfg = run.cfg
            demos = demos_from_config(cfg, run.agent)  # the warm-up's own
            start_weights = copy.deepcopy(run.model.state_dict())
            seconds: dict[bool, list[float]] = {True: [], False: []}
            losses: dict[bool, list[float]] = {}
            for _ in range(rounds):
                for share in (True, False):
                    run.model.load_state_dict(start_weights)
                    learner = Learner.for_run(run.model, replace(cfg, learner=replace(cfg.learner, share_prompts=share)),
                                              run.agent.tokenizer.pad_token_id, len(run.tokenizer), lr=cfg.sft.sft_lr,
                                              seed=cfg.seed)  # fmt: skip
                    begin = time.perf_counter()
                    losses[share] = warm_up(learner, demos, steps, cfg.sft.sft_batch_size, cfg.seed)
                    seconds[share].append((time.perf_counter() - begin) / steps)
    shared, full = (sum(seconds[k]) / rounds for k in (True, False))
    gap = max(abs(a - b) for a, b in zip(losses[True], losses[False]))
    return {"steps": steps, "rounds": rounds, "shared_s": shared, "full_s": full, "ratio": full / shared,
            "max_loss_gap": gap, "last_loss": losses[True][-1], "demos": len(demos),
            "mean_prompt_tokens": sum(len(d.prompt_ids) for d in demos) / len(demos)}  # fmt: skip


def print_warmup(r: dict) -> None:
    print(f"\n== warmup: the default job's SFT step, {r['rounds']} alternating rounds of {r['steps']} steps "
          f"({r['demos']} demonstrations, {r['mean_prompt_tokens']:.0f} prompt tokens on average)")  # fmt: skip
    print(f"{'full prompts':<44}{r['full_s']:8.3f} s/step")
    print(f"{'shared opening (the default)':<44}{r['shared_s']:8.3f} s/step")
    print(f"{'ratio full / shared':<44}{r['ratio']:8.3f}")
    print(f"largest loss gap between the two over the steps: {r['max_loss_gap']:.2e} (last loss {r['last_loss']:.4f})")


# ---- trl: against TRL's GRPOTrainer, then our side replayed --------------------------


def trl_part(w) -> dict:
    """benchmarks/trl_compare.py on workload `w` from one shared warm start; then our side once more,
    replayed as in `hardware`: what bounds the ratio. UnequalWork when the sides' work differs."""
    from benchmarks import trl_compare as tc

    with tempfile.TemporaryDirectory() as tmp:
        w = tc.warm_start(w, Path(tmp))
        result = {"ours": tc.run_ours(w), "trl": tc.run_trl(w)}
        result["ratio"] = tc.print_comparison(result["ours"], result["trl"], w)  # UnequalWork: no ratio, no replay
        hw = hardware(w.steps + 1, Path(tmp), None, tc.our_flags(w, str(Path(tmp) / "run")))["mean"]
    result["ours_hardware"] = hw
    trl_step = sum(result["trl"]["step_seconds"]) / len(result["trl"]["step_seconds"])
    pure = hw["pure_generation_s"] + hw["pure_update_s"]
    print(f"our step replayed: {hw['wall_s']:.3f} s wall = {hw['ratio']:.2f} x its pure model work "
          f"({hw['pure_generation_s']:.3f} s generation + {hw['pure_update_s']:.3f} s update; "
          f"{hw['pure_update_unshared_s']:.3f} s without shared prompts); TRL's step {trl_step:.3f} s = "
          f"{trl_step / pure:.2f} x our pure model work (the ratio with no overhead at all)")  # fmt: skip
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_speed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--iterations", type=int, default=4, help="hardware: iterations of the default job (>= 2)")
    p.add_argument("--model", default=None, help="hardware: start from this (warmed-up) checkpoint, no SFT")
    p.add_argument("--train-flags", nargs=argparse.REMAINDER, default=[],
                   help="hardware: more algos.train flags (last on the line), e.g. a smaller job")  # fmt: skip
    p.add_argument("--trl-flags", nargs=argparse.REMAINDER, default=[],
                   help="trl: benchmarks.trl_compare flags (last on the line): --model, --steps, --sft-steps, "
                        "--prompts, --group-size")  # fmt: skip
    p.add_argument("--gigpo-sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6])
    p.add_argument("--repeats", type=int, default=3, help="gigpo: timings per size (the best is kept)")
    p.add_argument("--warmup-steps", type=int, default=20, help="warmup: SFT steps per round")
    p.add_argument("--warmup-rounds", type=int, default=2, help="warmup: alternating rounds of each layout")
    p.add_argument("--out", type=Path, default=Path("runs/bench_speed"))
    args = p.parse_args(argv)
    if args.iterations < 2:
        print("error: --iterations must be at least 2 (the first iteration is not measured)", file=sys.stderr)
        return 2
    if "trl" in args.parts:
        from benchmarks.trl_compare import workload

        if importlib.util.find_spec("trl") is None:
            print("error: the TRL comparison needs trl: scripts/setup.sh bench (or pip install -e .[bench])",
                  file=sys.stderr)  # fmt: skip
            return 2
        w = workload(args.trl_flags, "python -m benchmarks.bench_speed --trl-flags")
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if "hardware" in args.parts:
                summary["hardware"] = hardware(args.iterations, Path(tmp), args.model, args.train_flags)
                print_hardware(summary["hardware"])
        if "trl" in args.parts:
            summary["trl"] = trl_part(w)
    except UnequalWork as e:
        print(f"error: no ratio: {e}", file=sys.stderr)
        return 1
    if "gigpo" in args.parts:
        summary["gigpo"] = gigpo_scaling(args.gigpo_sizes, args.repeats)
        print_gigpo(summary["gigpo"], summary.get("hardware", {}).get("mean"))
    if "warmup" in args.parts:
        summary["warmup"] = warmup_step(args.warmup_steps, args.warmup_rounds, args.train_flags)
        print_warmup(summary["warmup"])
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\nwritten: {args.out / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
