"""Where GiGPO's credit goes: one batch of rollouts from a checkpoint, and each step's advantage split
into GRPO's episode term and GiGPO's anchor-state step term.

    python -m scripts.trace_credit --checkpoint runs/RUN/checkpoints/iter_0 --tasks 0 1 2 3 \
        --output eval/credit.md
    python -m scripts.trace_credit --checkpoint CKPT --advantages penalty_placement return episode_baseline trajectory

Each task (a training reset seed) is played by one group of the checkpoint's group size, sampled at
its training temperature, with its advantage settings (`--algo gigpo`'s, whatever the run's algo was)
or others (`--advantages`; the same sampling seed plays the same episodes, so settings compare on one batch).
For every group: how many episodes were won, the step term's share of the advantages' magnitudes and
the rows where it is not 0 and the rows whose sign it changes from GRPO's (as `gigpo/step_share`,
`gigpo/step_nonzero_frac` and `gigpo/sign_change_frac` log them), and the anchor groups' sizes;
for the batch, the invalid-action rows that get a positive advantage under GRPO and under GiGPO
(`adv/invalid_positive_frac`). Then one won and one lost episode of each group, step by step: the action, the
step return, the anchor group (its size and mean return), the episode term (GRPO's whole advantage),
omega x the step term, and GiGPO's sum. The rewards are the env's (a run's --reward layer is not
applied). Writes markdown to stdout, and to --output if given.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields, replace
from pathlib import Path

import numpy as np


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m scripts.trace_credit", description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="a checkpoint folder (runs/RUN/checkpoints/iter_N)")
    p.add_argument("--tasks", type=int, nargs="+", default=[0, 1, 2, 3], help="training reset seeds, a group each")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--advantages", nargs="*", default=[], metavar="KEY VALUE",
                   help="advantage settings instead of the run's, e.g. penalty_placement step episode_baseline step")
    p.add_argument("--output", type=Path, default=None, help="also write the markdown here")
    return p.parse_args(argv)


def collect(args: argparse.Namespace):
    """(config, trajectories): one group per task from the checkpoint's policy."""
    from algos import distributed
    from algos.cli import key_value_pairs
    from algos.collector import Collector
    from algos.config import ConfigError, env_kwargs, from_flat
    from algos.policy import build_policy
    from algos.resolve import resolve
    from algos.validate import validate
    from scripts.evaluate import checkpoint_dir, load_run_config

    path = checkpoint_dir(args.checkpoint)
    if min(args.tasks) < 0:
        raise ConfigError("--tasks are reset seeds: integers >= 0")
    cfg, _ = load_run_config(str(path))
    cfg = replace(cfg, advantages=overridden(cfg.advantages, key_value_pairs(args.advantages)))
    cfg = from_flat(dict(model=str(path), output_dir="", sft_steps=0, seed=args.seed, backend="hf", lora_rank=0,
                         report_to="none"), cfg)  # fmt: skip
    validate(cfg)
    device = distributed.device_for(cfg.device, distributed.SINGLE)
    cfg = resolve(cfg, distributed.SINGLE, device)
    agent = build_policy(cfg, device=device)[2]
    collector = Collector(cfg.env, len(args.tasks), cfg.data.group_size, env_kwargs(cfg), cfg.workers)
    try:
        return cfg, collector.collect(agent, list(args.tasks))
    finally:
        collector.close()


def overridden(section, values: dict[str, str]):
    """`section` (a config dataclass) with `values` in place, each read as the type of the value it
    replaces. Raises ConfigError for a key the section does not have, or a value of the wrong type."""
    from algos.config import ConfigError

    names = [f.name for f in fields(section)]
    changes = {}
    for key, text in values.items():
        if key not in names:
            raise ConfigError(f"--advantages: no setting {key!r}; choose from {', '.join(names)}")
        kind = type(getattr(section, key))
        try:
            changes[key] = kind(text) if kind is not bool else text.lower() in ("1", "true", "yes")
        except ValueError:
            raise ConfigError(f"--advantages: {key} takes a {kind.__name__}, not {text!r}") from None
    section = replace(section, **changes)
    try:
        section.check()
    except ValueError as e:
        raise ConfigError(f"--advantages: {e}") from None
    return section


def trace(cfg, trajectories) -> str:
    """The markdown report of one batch (module docstring)."""
    from algos import advantages as adv
    from algos import credit

    a = cfg.advantages
    steps = [s for t in trajectories for s in t.steps]
    rewards, traj_ids, group_ids, keys, common = credit.advantage_inputs(a, steps, "gigpo")
    ep, step = adv.gigpo_terms(rewards, traj_ids, group_ids, keys, gamma=a.gamma, **common)
    step = a.omega * step
    returns = adv.discounted_returns(rewards, traj_ids, a.gamma) - common.get("penalties", 0.0)  # as GiGPO's step term reads them
    sizes = adv.anchor_group_sizes(group_ids, keys)
    anchor = {}  # (group, key) -> the returns of its rows
    for g, k, r in zip(group_ids.tolist(), keys, returns.tolist()):
        anchor.setdefault((g, k), []).append(r)
    row_of = {id(s): i for i, s in enumerate(steps)}
    out = [f"# Credit on {cfg.env}: {len(trajectories)} episodes in {len(set(group_ids.tolist()))} groups",
           "", f"gamma {a.gamma}, omega {a.omega}, norm {a.norm}, episode baseline {a.episode_baseline}, "
           f"invalid penalty {a.invalid_penalty} ({adv.penalty_placement(a, 'gigpo')})", "",
           "| group (task) | won | rows | step share | step term not 0 | sign not GRPO's | anchor group size: mean, max |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    by_group: dict[int, list] = {}
    for t in trajectories:
        by_group.setdefault(t.group_id, []).append(t)
    for g, group in by_group.items():
        rows = np.array([row_of[id(s)] for t in group for s in t.steps])
        signal = credit.step_signal(ep[rows], step[rows])
        out.append(f"| {g} ({group[0].seed}) | {sum(t.won for t in group)}/{len(group)} | {len(rows)} | "
                   f"{signal['gigpo/step_share']:.2f} | {signal['gigpo/step_nonzero_frac']:.0%} | "
                   f"{signal['gigpo/sign_change_frac']:.0%} | "
                   f"{sizes[rows].mean():.1f}, {sizes[rows].max()} |")  # fmt: skip
    total = credit.step_signal(ep, step)
    out += ["", f"Whole batch: step share {total['gigpo/step_share']:.2f}, step term not 0 on "
            f"{total['gigpo/step_nonzero_frac']:.0%} of {len(steps)} rows, its sign not GRPO's on "
            f"{total['gigpo/sign_change_frac']:.0%}. Invalid actions: "
            f"{sum(not s.action_valid for s in steps)} rows, with a positive advantage under GRPO "
            f"{credit.invalid_positive(ep, steps):.0%}, under GiGPO {credit.invalid_positive(ep + step, steps):.0%}."]  # fmt: skip
    for g, group in by_group.items():
        for label, t in (("won", next((t for t in group if t.won), None)), ("lost", next((t for t in group if not t.won), None))):  # fmt: skip
            if t is None:
                continue
            out += ["", f"## Group {g} (task {t.seed}), a {label} episode ({len(t.steps)} steps)", "",
                    "| t | action | valid | reward | return | anchor: size, mean return | episode term (GRPO) | omega x step term | GiGPO |",
                    "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
            for s in t.steps:
                i = row_of[id(s)]
                same = anchor[(int(group_ids[i]), keys[i])]
                out.append(f"| {s.t} | {s.action or '(' + s.parse_status + ')'} | {'yes' if s.action_valid else 'no'} | "
                           f"{s.reward:g} | {returns[i]:.3f} | {len(same)}, {np.mean(same):.3f} | {ep[i]:+.3f} | "
                           f"{step[i]:+.3f} | {ep[i] + step[i]:+.3f} |")  # fmt: skip
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from algos.config import ConfigError

    args = parse_args(argv)
    try:
        cfg, trajectories = collect(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = trace(cfg, trajectories)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
