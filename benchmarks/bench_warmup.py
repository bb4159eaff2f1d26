"""How long a warm-up should be: held-out success after N SFT steps, and on games that were never
generated for training or held out (TextWorld), from one warm-up per seed.

    python -m benchmarks.bench_warmup --config configs/textworld_coin.yaml --steps 90 360 --seeds 0 1 2
    python -m benchmarks.bench_warmup --out runs/bench_warmup/coin5 --flags --env-kwargs level 5 num_games 32

Each seed records the preset's demonstrations once and trains `max(--steps)` supervised steps; after
each listed step count the policy is evaluated on the env's held-out tasks and, for a TextWorld family,
on `--unseen` games of the same family and level generated from seeds outside both pools (the reset
text of each is checked against every training and held-out game's, and duplicates are counted). The
warm-up's batches and its learning rate (constant after a linear ramp) depend on the step alone
(algos/sft.py `warm_up`), so the model after 90 steps of a 360-step warm-up is the 90-step warm-up.

Rows go to --out/results.jsonl as they come, one per (seed, steps); a seed whose rows are all there is
skipped, so an interrupted benchmark continues where it stopped. The summary (mean, std and each seed,
and the paired difference between the first and the last step count with its t interval) prints at the
end and goes to --out/summary.md. Set OMP_NUM_THREADS to the cores it may use.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

UNSEEN_SEED = 2_000_000  # TextWorld game seeds of the unseen games: past the training (0..) and held-out (10^6..) pools


def unseen_games(cfg, count: int) -> tuple[list[Path], int]:
    """`count` games of the env's TextWorld family and level from seeds outside both pools, and how many
    of them open exactly like a training or held-out game (the same reset observation)."""
    import gymnasium as gym

    from algos.config import env_kwargs
    from envs.tw_games import ensure_games

    env = gym.make(cfg.env, **env_kwargs(cfg)).unwrapped
    games = ensure_games(env.family, env.level, [UNSEEN_SEED + i for i in range(count)], held_out=True)
    known = {_opening(g) for g in [*env.train_games, *env.held_out_games]}
    env.close()
    return games, sum(_opening(g) in known for g in games)


def _opening(game: Path) -> str:
    import gymnasium as gym

    env = gym.make("TextWorld-Games-v0", games=[str(game)], held_out_fraction=0.0)
    obs, _ = env.reset(seed=0)
    env.close()
    return obs


def run_seed(config: str, flags: list[str], seed: int, steps: list[int], episodes: int, unseen: list[Path],
             limit: int) -> list[dict]:  # fmt: skip
    """One warm-up to max(steps), evaluated after each of `steps`."""
    from algos import distributed
    from algos.cli import parse_config
    from algos.evaluation import evaluate, held_out_seeds, play, summarize
    from algos.policy import build_policy
    from algos.resolve import resolve
    from algos.sft import warm_up_from_config

    cfg = parse_config(["--config", config, *flags, "--seed", str(seed), "--sft-steps", str(max(steps)), "--device",
                        "cpu", "--output-dir", "unused", "--eval-episodes", str(episodes)])  # fmt: skip
    cfg = resolve(cfg, distributed.SINGLE, "cpu")
    model, tokenizer, agent = build_policy(cfg, device="cpu")
    rows, started = [], time.perf_counter()

    def measure(step: int) -> None:
        if step not in steps:
            return
        agent.backend.sync(model)  # drop the prefix caches computed with the previous weights
        row = {"seed": seed, "steps": step, "sft_s": time.perf_counter() - started,
               "held_out": evaluate(agent, cfg, episodes).success_rate, "held_out_episodes": episodes}  # fmt: skip
        if unseen:
            kwargs = {"games": [str(g) for g in unseen], "held_out_games": [str(g) for g in unseen],
                      "max_episode_steps": limit}  # fmt: skip
            trajs = play(agent, "TextWorld-Games-v0", kwargs, held_out_seeds(len(unseen)), leave=False)
            row.update(unseen=summarize(trajs)["success_rate"], unseen_episodes=len(unseen))
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)

    warm_up_from_config(cfg, agent, model, len(tokenizer), after_step=measure)
    return rows


def summary(rows: list[dict], steps: list[int]) -> str:
    from algos.evaluation import interval95, mean_std

    keys = [k for k in ("held_out", "unseen") if any(k in r for r in rows)]
    lines = ["| SFT steps | " + " | ".join(f"{k} (mean ± std)" for k in keys) + " | per seed |",
             "|---|" + "---|" * len(keys) + "---|"]  # fmt: skip
    for n in steps:
        at = sorted((r for r in rows if r["steps"] == n), key=lambda r: r["seed"])
        cells = []
        for k in keys:
            m, s = mean_std([100 * r[k] for r in at])
            cells.append(f"{m:.1f} ± {s:.1f}")
        seeds = "; ".join(f"s{r['seed']}: " + " / ".join(f"{100 * r[k]:.1f}" for k in keys) for r in at)
        lines.append(f"| {n} | " + " | ".join(cells) + f" | {seeds} |")
    first, last = steps[0], steps[-1]
    for k in keys:
        by_seed = {r["seed"]: r[k] for r in rows if r["steps"] == first}
        diffs = [100 * (r[k] - by_seed[r["seed"]]) for r in rows if r["steps"] == last and r["seed"] in by_seed]
        lo, hi = interval95(diffs)
        lines.append(f"\n{k}: {last} - {first} steps = {mean_std(diffs)[0]:+.1f} points, 95 % interval "
                     f"[{lo:+.1f}, {hi:+.1f}] over {len(diffs)} seeds (paired by seed)")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_warmup", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/textworld_coin.yaml", help="the preset whose warm-up is measured")
    p.add_argument("--steps", type=int, nargs="+", default=[90, 360], help="SFT step counts to evaluate after")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--episodes", type=int, default=32, help="held-out episodes (one per task)")
    p.add_argument("--unseen", type=int, default=32, help="unseen games (TextWorld families only; 0: none)")
    p.add_argument("--out", type=Path, default=Path("runs/bench_warmup"))
    p.add_argument("--flags", nargs=argparse.REMAINDER, default=[], help="more algos.train flags (last)")
    a = p.parse_args(argv)
    steps = sorted(set(a.steps))
    from algos.cli import parse_config

    cfg = parse_config(["--config", a.config, *a.flags])
    textworld = cfg.env.startswith("TextWorld-") and cfg.env != "TextWorld-Games-v0"
    unseen, duplicates = unseen_games(cfg, a.unseen) if textworld and a.unseen else ([], 0)
    if unseen:
        import gymnasium as gym

        import envs  # noqa: F401  (registers the ids)

        limit = gym.spec(cfg.env).max_episode_steps
        limit = int(cfg.env_kwargs.get("max_episode_steps", limit))
        print(f"{len(unseen)} unseen games, {duplicates} of them open like a training or held-out game",
              file=sys.stderr)  # fmt: skip
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    for seed in a.seeds:
        if {r["steps"] for r in rows if r["seed"] == seed} >= set(steps):
            continue
        rows = [r for r in rows if r["seed"] != seed]  # a seed cut off midway is measured again, whole
        new = run_seed(a.config, a.flags, seed, steps, a.episodes, unseen, limit if unseen else 0)
        rows += new
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    header = (f"{cfg.env} {json.dumps(cfg.env_kwargs)} ({' '.join([a.config, *a.flags])}): {a.episodes} held-out tasks"
              + (f", {len(unseen)} unseen games ({duplicates} open like a known one)" if unseen else "")
              + f", seeds {a.seeds}\n\n")  # fmt: skip
    text = header + summary([r for r in rows if r["seed"] in a.seeds], steps)
    (a.out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
