"""The report of benchmarks.bench_learning: statistics of held-out success curves, and the summary
(summary.json, the markdown table, curves.png) of a benchmark's finished runs.

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

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

from algos.evaluation import Lift, interval95, mean_std, paired_lift
from benchmarks.learning_presets import SFT, Preset

THRESHOLDS = (0.5, 0.8)
Comparisons = Sequence[tuple[tuple[str, str], tuple[str, str]]]  # ((preset, algo) a, (preset, algo) b): a - b
Curve = list[tuple[float, float]]  # (env steps, held-out success) per evaluation, in env-step order


# ---- statistics --------------------------------------------------------------------
def steps_to_reach(curve: Curve, threshold: float) -> float | None:
    """Env steps at the first evaluation at or above `threshold` (no interpolation); None if none."""
    return next((x for x, y in curve if y >= threshold), None)


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
    return evaluated(rows[last + 1 :])


def evaluated(rows: Sequence[dict]) -> bool:
    """Whether any of the rows is a held-out evaluation."""
    return any(r.get("eval/success_rate") is not None for r in rows)


def arm_finished(rows: Sequence[dict], p: Preset, arm: str) -> bool:
    """Whether a run of the preset's `arm` is done: an RL run's final evaluation is logged (`is_finished`);
    the SFT control's one evaluation, after its warm-up, is."""
    if arm == SFT:
        return evaluated(rows)
    return is_finished(rows, p.budget, p.iterations)


def warm_reference(seed_dir: Path, p: Preset) -> Path | None:
    """The run whose first evaluation is the SFT control's warm-up side for one seed: the first of the preset's
    RL runs there that evaluated the warm-up (the same model on the same tasks); None if none has yet."""
    return next((seed_dir / a for a in p.algos if a != SFT and evaluated(read_rows(seed_dir / a))), None)


def run_lift(run: Path, before: Path | None = None) -> Lift | None:
    """A run's final held-out evaluation against the first one of `before` (default: its own, the
    warm-up's), task by task, from their held_out.jsonl (runs before it existed: None)."""
    from algos.run_dir import read_held_out

    after, first = read_held_out(run), read_held_out(before or run)
    if not after or not first or (before in (None, run) and len(after) < 2):
        return None
    sides = []
    for h in (first[min(first)], after[max(after)]):
        tasks: dict[int, list[bool]] = {}
        for task, won in zip(h["task"], h["won"]):
            tasks.setdefault(task, []).append(bool(won))
        sides.append(tasks)
    return paired_lift(*sides)


def read_rows(run: Path) -> list[dict]:
    from algos.run_dir import read_metrics

    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return read_metrics(run)


# ---- report ------------------------------------------------------------------------
def summarize(out: Path, presets: dict[str, Preset], seeds: list[int], comparisons: Comparisons = ()) -> dict:
    """The finished runs of `presets` under <out>/<preset>/s<seed>/<algo>, and `comparisons` among them."""
    from scripts.plot import series

    summary = {}
    for key, p in presets.items():
        algos = {}
        for algo in p.algos:
            curves, invalid, held_invalid, paired = {}, {}, {}, {}
            for seed in seeds:
                run = out / key / f"s{seed}" / algo
                rows = read_rows(run)
                before = warm_reference(run.parent, p) if algo == SFT else run
                if not arm_finished(rows, p, algo) or before is None:
                    continue
                if lift := run_lift(run, before):
                    paired[seed] = [lift.points, lift.low, lift.high, lift.tasks]
                first = read_rows(before) if algo == SFT else []  # the control's warm-up side: a sibling's first
                curves[seed] = list(zip(*series(first[:1] + rows, "eval/success_rate", "data/env_steps_total")))
                rate = series(rows, "rollout/invalid_action_rate", "iteration")[1]
                if rate:  # the control runs no rollouts
                    invalid[seed] = [rate[0], rate[-1]]  # the first and the last iteration's rollouts
                held = series(first[:1] + rows, "eval/invalid_action_rate", "iteration")[1]
                if len(held) == len(curves[seed]):  # logged at every evaluation (runs since it exists)
                    held_invalid[seed] = [held[0], held[-1]]  # after the warm-up, and the final one
            warm, final = {s: c[0][1] for s, c in curves.items()}, {s: c[-1][1] for s, c in curves.items()}
            lift = paired_differences(final, warm)
            xs, mean, std = band(list(curves.values()))
            algos[algo] = {
                "seeds": list(curves),
                "warm_up": warm,
                "warm_up_mean_std": _finite(mean_std(list(warm.values()))),
                "final": final,
                "final_mean_std": _finite(mean_std(list(final.values()))),
                "lift": lift,
                "lift_mean_std": _finite(mean_std(list(lift.values()))),
                "lift_interval95": _finite(interval95(list(lift.values()))),
                "lift_paired": paired,
                "invalid_first_last": invalid,
                "invalid_first_last_mean": _pair_mean(invalid),
                "held_out_invalid": held_invalid,
                "held_out_invalid_mean": _pair_mean(held_invalid),
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
    return {"presets": summary, "comparisons": compare(summary, comparisons)}


def compare(summary: dict, comparisons: Comparisons) -> list[dict]:
    """The comparisons whose presets ran: per-seed final differences in points, mean +- std, 95 % interval."""
    out = []
    for (ka, aa), (kb, ab) in comparisons:
        if aa not in summary.get(ka, {}).get("algos", {}) or ab not in summary.get(kb, {}).get("algos", {}):
            continue
        diff = paired_differences(summary[ka]["algos"][aa]["final"], summary[kb]["algos"][ab]["final"])
        out.append({"a": f"{ka}/{aa}", "b": f"{kb}/{ab}", "env": summary[ka]["env"], "seeds": diff,
                    "mean_std": _finite(mean_std(list(diff.values()))),
                    "interval95": _finite(interval95(list(diff.values())))})  # fmt: skip
    return out


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _pair_mean(pairs: dict) -> list[float | None]:
    """The mean first and the mean last value of per-seed [first, last] pairs (None without seeds)."""
    return [_mean([v[0] for v in pairs.values()]), _mean([v[1] for v in pairs.values()])]


def _percent_pair(pair: Sequence[float | None] | None) -> str:
    """A [first, last] pair of fractions as "first → last" in percent, "-" when there is none."""
    first, last = pair or (None, None)
    return "-" if first is None else f"{100 * first:.1f} → {100 * last:.1f}"


def _finite(values: Sequence[float]) -> list[float | None]:
    """nan as None: JSON has no NaN."""
    return [None if math.isnan(v) else v for v in values]


def _mean_std(ms: Sequence[float | None], scale: float = 100, sign: str = "") -> str:
    mean, std = ms
    if mean is None:
        return "-"
    return f"{scale * mean:{sign}.1f}" + ("" if std is None else f" ± {scale * std:.1f}")


def _interval(bounds: Sequence[float | None]) -> str:
    lo, hi = bounds
    return "-" if lo is None else f"[{lo:+.1f}, {hi:+.1f}]"


def _per_seed(points: dict, paired: dict) -> str:
    """Each seed's points, with its paired interval over the held-out tasks where the run recorded them."""
    def one(seed) -> str:
        if seed not in paired:
            return f"s{seed}: {points[seed]:+.1f}"
        _, low, high, tasks = paired[seed]
        return f"s{seed}: {points[seed]:+.1f} [{low:+.1f}, {high:+.1f}] ({tasks})"

    return ", ".join(one(seed) for seed in points)


def _steps(x: float | None) -> str:
    return "never" if x is None else "0" if x == 0 else f"{x / 1000:.1f}k"


def table(summary: dict) -> str:
    presets = summary["presets"]
    lines = ["| preset | env | algo | seeds | warm-up (%) | final (%) | steps to 50 %: mean curve (per seed) "
             "| steps to 80 %: mean curve (per seed) | invalid actions, first → last iteration (%) "
             "| held-out invalid actions, warm-up → final (%) |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for key, s in presets.items():
        for algo, a in s["algos"].items():
            reach = [f"{_steps(r['mean_curve'])} ({', '.join(_steps(v) for v in r['seeds'].values()) or '-'})"
                     for r in a["steps_to"].values()]  # fmt: skip
            invalid, held = _percent_pair(a.get("invalid_first_last_mean")), _percent_pair(a.get("held_out_invalid_mean"))
            lines.append(f"| {key} | {s['env']} | {algo} | {len(a['seeds'])} | {_mean_std(a['warm_up_mean_std'])} "
                         f"| {_mean_std(a['final_mean_std'])} | {' | '.join(reach)} | {invalid} | {held} |")  # fmt: skip
    lines += ["", "| final − warm-up (points) | seeds | mean ± std | 95 % interval over seeds "
              "| per seed (paired 95 % interval over its tasks) |", "|---|---|---|---|---|"]  # fmt: skip
    for key, s in presets.items():
        for algo, a in s["algos"].items():
            if a["lift"]:
                seeds = _per_seed(a["lift"], a["lift_paired"])
                lines.append(f"| {key}/{algo} | {len(a['lift'])} | {_mean_std(a['lift_mean_std'], 1, '+')} "
                             f"| {_interval(a['lift_interval95'])} | {seeds} |")  # fmt: skip
    lines += ["", "| a − b, final (points) | mean ± std | 95 % interval | per seed |", "|---|---|---|---|"]
    for c in summary["comparisons"]:
        per_seed = ", ".join(f"s{seed}: {v:+.1f}" for seed, v in c["seeds"].items()) or "-"
        lines.append(f"| {c['a']} − {c['b']} | {_mean_std(c['mean_std'], 1, '+')} | {_interval(c['interval95'])} "
                     f"| {per_seed} |")  # fmt: skip
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
