"""Learning curves from run directories, several runs overlaid.

    python -m scripts.plot runs/KeyDoor-v0-gigpo-s0 runs/KeyDoor-v0-grpo-s0 --out curves.png
    python -m scripts.plot runs/a runs/b --metrics eval/success_rate rollout/invalid_action_rate \
        --x data/env_steps_total --labels GiGPO GRPO --smooth 5

One panel per metric (default: held-out success, rollout success, episode length, invalid
actions, loss), one line per run, read from each run's metrics.jsonl; `--x` picks the
horizontal axis (iteration, or any logged tag such as data/env_steps_total). `--smooth N`
adds a trailing moving average over N points (the raw points stay, faint). Missing
metrics are skipped with a note; a run without any of them is an error. A run killed while
writing its last line still plots (that line is skipped with a note).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_METRICS = ("eval/success_rate", "rollout/success_rate", "rollout/episode_length",
                   "rollout/invalid_action_rate", "train/loss")  # fmt: skip


def read_series(run: Path, metric: str, x: str) -> tuple[list[float], list[float]]:
    """(xs, ys) of one metric of a run (`series` of its metrics.jsonl rows)."""
    from algos.run_dir import read_metrics

    return series(read_metrics(run), metric, x)


def series(rows: list[dict], metric: str, x: str) -> tuple[list[float], list[float]]:
    """(xs, ys) of one metric: rows holding it, x from the same row (or the iteration's rows)."""
    x_at: dict[int, float] = {}
    for r in rows:
        if r.get(x) is not None:
            x_at[r["iteration"]] = float(r[x])
    points = []
    for r in rows:
        value = r.get(metric)
        if value is None:
            continue
        xv = float(r["iteration"]) if x == "iteration" else x_at.get(r["iteration"], 0.0 if r["iteration"] == 0 else None)
        if xv is not None:
            points.append((xv, float(value)))
    points.sort()
    return [p[0] for p in points], [p[1] for p in points]


def moving_average(ys: list[float], n: int) -> list[float]:
    return [sum(ys[max(0, i - n + 1) : i + 1]) / len(ys[max(0, i - n + 1) : i + 1]) for i in range(len(ys))]


def plot(runs: list[Path], metrics: list[str], out: Path, x: str = "iteration", labels: list[str] | None = None,
         smooth: int = 1) -> list[str]:  # fmt: skip
    """Draw the panels; returns the metrics that no run had (left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = labels or [r.name for r in runs]
    series = {m: [(label, *read_series(run, m, x)) for run, label in zip(runs, labels)] for m in metrics}
    present = [m for m in metrics if any(xs for _, xs, _ in series[m])]
    missing = [m for m in metrics if m not in present]
    if not present:
        raise ValueError(f"none of {', '.join(metrics)} is in the metrics.jsonl of {', '.join(map(str, runs))}")
    cols = min(3, len(present))
    rows = (len(present) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, metric in zip(axes.flat, present):
        for i, (label, xs, ys) in enumerate(series[metric]):
            if not xs:
                continue
            color = f"C{i % 10}"
            if smooth > 1 and len(ys) > 1:
                ax.plot(xs, ys, color=color, alpha=0.25, linewidth=1)
                ax.plot(xs, moving_average(ys, smooth), color=color, label=label, linewidth=2)
            else:
                ax.plot(xs, ys, color=color, label=label, marker="o" if len(xs) < 20 else None, linewidth=2)
        ax.set_title(metric)
        ax.set_xlabel(x)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return missing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.plot", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories (each with metrics.jsonl)")
    p.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS))
    p.add_argument("--x", default="iteration", help="horizontal axis: iteration or a logged tag")
    p.add_argument("--labels", nargs="+", help="one legend label per run (default: folder names)")
    p.add_argument("--smooth", type=int, default=1, help="moving average over N points")
    p.add_argument("--out", type=Path, default=Path("curves.png"))
    args = p.parse_args(argv)
    try:
        for run in args.runs:
            if not (run / "metrics.jsonl").is_file():
                raise ValueError(f"{run} has no metrics.jsonl; pass run directories written by algos.train")
        if args.labels and len(args.labels) != len(args.runs):
            raise ValueError(f"--labels needs one label per run ({len(args.runs)}), got {len(args.labels)}")
        if args.smooth < 1:
            raise ValueError("--smooth must be >= 1")
        missing = plot(args.runs, args.metrics, args.out, args.x, args.labels, args.smooth)
    except (ValueError, OSError) as e:  # a bad metrics line names its file and line (read_metrics)
        print(f"error: {e}", file=sys.stderr)
        return 2
    for m in missing:
        print(f"note: no run logged {m}; left out", file=sys.stderr)
    print(f"curves: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
