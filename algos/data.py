"""Data layer: which tasks to roll out, how many rollouts each, and which groups to train on.

GRPO learns only from groups whose returns differ: a task the policy always or never
solves costs G rollouts and teaches nothing. Difficulty is measured against the policy
being trained, so it is re-estimated as the policy changes:

- `TaskSampler` keeps, per task (a reset seed of the env's task pool), a Beta posterior of
  its pass rate under the current policy (Jeffreys prior). Counts decay by `decay` per
  iteration since they were measured, so old outcomes weigh less than new ones. Each
  iteration's tasks are drawn: a share from unseen tasks (exploration), a share from the
  stalest tasks not measured for `stale_after` iterations (re-measurement), the rest in
  proportion to their *usefulness*: the posterior probability that a group of G rollouts
  on the task has mixed outcomes, 1 - E[p^G] - E[(1-p)^G], high in the band where a task
  is sometimes solved and sometimes not, low for tasks known to be always solved or never
  (and rising again as their counts decay). `mode="uniform"` switches all of this off.
- `group_size_for`: the smallest G in [G_min, G_max] with (1 - p)^G <= target, the chance
  that a group of G rollouts has no success at all; `plan_groups` sizes the groups of an
  iteration by it within a fixed rollout budget (num_groups x group_size).
- `DataLayer.next_batch`: dynamic sampling (DAPO): uninformative groups (every advantage
  they would give is zero: the trainer asks its estimator, so GiGPO's step term and the
  invalid-action penalty count) are dropped and replaced by fresh groups until the batch
  holds as many informative groups as the first round planned, or `max_extra_groups` extra
  groups were collected; then it trains on what there is (possibly nothing) and logs it.
  Dropped groups still update the sampler: they are measurements too.

Advantages stay correct with unequal group sizes: every statistic is taken per group id.
The sampler's state (posteriors, iteration, RNG) goes into checkpoints (`state_dict`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from envs.base import at_least, choose

if TYPE_CHECKING:  # the config imports this module: it stays free of torch and the collector
    from algos.collector import Trajectory

SAMPLER_MODES = ("band", "uniform")
DEFAULT_TASK_POOL = 256  # tasks of an env without a finite pool of its own (procedural layouts)
PRIOR = 0.5  # Jeffreys prior Beta(1/2, 1/2): a task never measured has estimate 0.5
BAND = (0.1, 0.9)  # "sometimes solved, sometimes not", for the metrics (data/band_fraction)


class TaskSampler:
    """Draws each iteration's tasks from `tasks` under the data section's mode, decay, group size,
    exploration and staleness (`cfg`, checked: DataConfig.check); `remeasure` is the share of an
    iteration's tasks that may go to stale ones."""

    def __init__(self, tasks: list[int], cfg: DataConfig, seed: int = 0, remeasure: float = 0.125) -> None:
        cfg.check()
        if not tasks:
            raise ValueError("the task pool is empty")
        self.tasks = list(tasks)
        self.mode, self.decay, self.group_size = cfg.task_sampler, cfg.sampler_decay, cfg.group_size
        self.explore, self.stale_after, self.remeasure = cfg.explore_frac, cfg.stale_after, remeasure
        self.rng = np.random.default_rng(seed)
        self.iteration = 0
        self.stats: dict[int, list[float]] = {}  # task -> [successes, failures, iteration measured]

    # -- estimates ---------------------------------------------------------------------
    def counts(self, task: int) -> tuple[float, float]:
        """(successes, failures) decayed to the current iteration."""
        if task not in self.stats:
            return 0.0, 0.0
        s, f, last = self.stats[task]
        w = self.decay ** (self.iteration - last)
        return s * w, f * w

    def estimate(self, task: int) -> tuple[float, float]:
        """Posterior mean and standard deviation of the task's pass rate."""
        s, f = self.counts(task)
        a, b = s + PRIOR, f + PRIOR
        n = a + b
        return a / n, math.sqrt(a * b / (n * n * (n + 1)))

    def pass_rate(self, task: int) -> float:
        """The estimate used to size groups: the posterior mean for a measured task, the
        mean over measured tasks for an unseen one (the policy's typical pass rate)."""
        if task in self.stats:
            return self.estimate(task)[0]
        if not self.stats:
            return PRIOR
        return float(np.mean([self.estimate(t)[0] for t in self.stats]))

    def usefulness(self, task: int) -> float:
        """P(a group of group_size rollouts on the task is neither all wins nor all losses),
        under the posterior: 1 - E[p^G] - E[(1-p)^G], with E[p^G] = prod_i (a+i)/(a+b+i)."""
        s, f = self.counts(task)
        a, b = s + PRIOR, f + PRIOR
        all_win = all_lose = 1.0
        for i in range(self.group_size):
            all_win *= (a + i) / (a + b + i)
            all_lose *= (b + i) / (a + b + i)
        return max(1.0 - all_win - all_lose, 1e-6)

    def in_band(self, task: int) -> bool:
        """Measured, with an estimated pass rate strictly inside BAND."""
        return task in self.stats and BAND[0] < self.estimate(task)[0] < BAND[1]

    # -- sampling ----------------------------------------------------------------------
    def sample(self, n: int) -> list[int]:
        """n distinct tasks (fewer only if the pool is smaller)."""
        n = min(n, len(self.tasks))
        if self.mode == "uniform":
            return [int(t) for t in self.rng.choice(self.tasks, size=n, replace=False)]
        chosen: list[int] = []
        unseen = [t for t in self.tasks if t not in self.stats]
        k = min(len(unseen), round(self.explore * n))
        chosen += [int(t) for t in self.rng.choice(unseen, size=k, replace=False)] if k else []
        stale = sorted(
            (self.stats[t][2], t) for t in self.stats if self.iteration - self.stats[t][2] >= self.stale_after
        )
        chosen += [t for _, t in stale[: min(n - len(chosen), round(self.remeasure * n))]]  # the stalest first
        taken = set(chosen)
        rest = [t for t in self.tasks if t not in taken]
        k = n - len(chosen)
        if k > 0:
            w = np.array([self.usefulness(t) for t in rest])
            chosen += [int(t) for t in self.rng.choice(rest, size=k, replace=False, p=w / w.sum())]
        return chosen

    # -- measurements ------------------------------------------------------------------
    def update(self, task: int, successes: int, failures: int) -> None:
        s, f = self.counts(task)
        self.stats[task] = [s + successes, f + failures, self.iteration]

    def step(self) -> None:
        """One iteration passed: estimates age by one."""
        self.iteration += 1

    def metrics(self) -> dict[str, float]:
        p = self.pass_rates()
        lo, hi = BAND
        return {
            "data/tasks_seen": float(len(self.stats)),
            "data/pass_rate_mean": float(p.mean()) if p.size else float("nan"),
            "data/frac_tasks_unsolved": float((p < lo).mean()) if p.size else float("nan"),
            "data/frac_tasks_solved": float((p > hi).mean()) if p.size else float("nan"),
        }

    def pass_rates(self) -> np.ndarray:
        return np.array([self.estimate(t)[0] for t in self.stats])

    def state_dict(self) -> dict:
        return {
            "iteration": self.iteration,
            "stats": {int(t): list(v) for t, v in self.stats.items()},
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        self.iteration = int(state["iteration"])
        self.stats = {int(t): [float(x) for x in v] for t, v in state["stats"].items()}
        self.rng.bit_generator.state = state["rng"]


def group_size_for(p: float, target: float, g_min: int, g_max: int) -> int:
    """Smallest G in [g_min, g_max] with (1 - p)^G <= target (g_max if none is)."""
    if p >= 1.0:
        return g_min
    if p <= 0.0:
        return g_max
    g = math.ceil(math.log(target) / math.log1p(-p) - 1e-9)  # the epsilon absorbs float error at exact powers
    return min(max(g, g_min), g_max)


def plan_groups(
    tasks: list[int], pass_rate: Callable[[int], float], budget: int, target: float, g_min: int, g_max: int
) -> list[tuple[int, int]]:
    """(task, G) in the given order while the rollouts fit in `budget`; the last group
    takes what is left if that is at least g_min."""
    plan, used = [], 0
    for task in tasks:
        g = min(group_size_for(pass_rate(task), target, g_min, g_max), budget - used)
        if g < g_min:
            break
        plan.append((task, g))
        used += g
    return plan


def zero_variance(trajs: list[Trajectory]) -> bool:
    """All episode returns (env reward) equal: the group says nothing about which rollout did better."""
    returns = [t.episode_return for t in trajs]
    return max(returns) - min(returns) == 0


@dataclass(frozen=True)
class DataConfig:
    """-- data: which tasks, how many rollouts each, which groups to train on --"""

    num_groups: int = 8
    """Groups per iteration; one start state (seed) per group."""
    group_size: int = 8
    """Rollouts per group (TRL: num_generations); >= 2."""
    task_sampler: str = "band"
    """band: draw tasks by their pass rate under the current policy, in proportion to the chance that a
    group on them has mixed outcomes (sometimes solved, sometimes not), exploring unseen and
    re-measuring stale tasks; uniform: all alike."""
    task_pool: int = 0
    """Training tasks = reset seeds 0..N-1; 0 = the env's own pool (its num_tasks, e.g. TextWorld's games) or 256."""
    sampler_decay: float = 0.95
    """Per-iteration decay of a task's success/failure counts: estimates follow the changing policy."""
    explore_frac: float = 0.25
    """Share of each iteration's tasks drawn from tasks never measured."""
    stale_after: int = 10
    """Tasks not measured for this many iterations are re-measured first (up to 1/8 of the groups)."""
    dynamic_sampling: bool = True
    """Drop groups that would give every step a zero advantage (episode and, for GiGPO, step terms) and
    collect fresh ones in their place (DAPO's dynamic sampling, made to know GiGPO's step term)."""
    max_extra_groups: int = 8
    """Cap on the replacement groups collected per iteration; short of it, train on what there is."""
    adaptive_group_size: bool = False
    """Size each group by its task's pass rate p: the smallest G with (1 - p)^G <= no_success_target,
    within [group_size_min, group_size_max], in a budget of num_groups x group_size rollouts."""
    group_size_min: int = 2
    group_size_max: int = 16
    no_success_target: float = 0.1

    def check(self) -> None:
        """The section's own values. Raises ValueError (one line)."""
        choose("task_sampler", self.task_sampler, SAMPLER_MODES)
        if not (0.0 < self.sampler_decay <= 1.0 and 0.0 <= self.explore_frac <= 1.0):
            raise ValueError("need 0 < sampler_decay <= 1 and 0 <= explore_frac <= 1")
        if not 0.0 < self.no_success_target < 1.0:
            raise ValueError(f"no_success_target must be in (0, 1) (got {self.no_success_target})")
        if self.adaptive_group_size and not 2 <= self.group_size_min <= self.group_size_max:
            raise ValueError(
                f"need 2 <= group_size_min <= group_size_max (got {self.group_size_min}, {self.group_size_max})"
            )
        if self.adaptive_group_size and self.group_size_min > self.num_groups * self.group_size:
            raise ValueError("group_size_min exceeds the rollout budget num_groups x group_size")
        if not self.group_size >= 2:
            raise ValueError(f"group_size must be >= 2 (got {self.group_size}): groups compare rollouts")
        at_least("num_groups", self.num_groups, 1)
        for name in ("task_pool", "stale_after", "max_extra_groups"):
            at_least(name, getattr(self, name), 0)


@dataclass(frozen=True)
class Round:
    """Groups to collect now: their seeds and sizes, numbered from the given first ids (ids stay
    unique over a run)."""

    seeds: list[int]
    sizes: list[int]
    first_group_id: int
    first_traj_id: int


# collect(seeds, group_sizes, first_group_id, first_traj_id) -> trajectories
CollectFn = Callable[[list[int], list[int], int, int], "list[Trajectory]"]


class DataLayer:
    """`informative(group)`: whether a group teaches anything, i.e. gives some step a nonzero
    advantage; the trainer passes its advantage estimator's answer (under GiGPO an all-won group whose
    routes differ in length still has step advantages). Default: some episode returns differ."""

    def __init__(
        self, cfg: DataConfig, sampler: TaskSampler, informative: Callable[[list[Trajectory]], bool] | None = None
    ) -> None:
        self.cfg, self.sampler = cfg, sampler
        self.informative = informative or (lambda group: not zero_variance(group))
        self.next_group_id = self.next_traj_id = 0

    @property
    def budget(self) -> int:
        return self.cfg.num_groups * self.cfg.group_size

    def _plan(self, n_groups: int, budget: int) -> list[tuple[int, int]]:
        cfg = self.cfg
        if not cfg.adaptive_group_size:
            n = min(n_groups, budget // cfg.group_size)
            return [(t, cfg.group_size) for t in self.sampler.sample(n)]
        candidates = self.sampler.sample(min(n_groups, budget // cfg.group_size_min))
        return plan_groups(
            candidates, self.sampler.pass_rate, budget, cfg.no_success_target, cfg.group_size_min, cfg.group_size_max
        )

    def draw(self) -> Draw:
        """This iteration's draw of groups; the caller collects each of its rounds (see Draw)."""
        return Draw(self)

    def next_batch(self, collect: CollectFn) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """A whole draw for a caller that collects a round in one call (`collect`): (groups to train on,
        every collected group, metrics)."""
        draw = self.draw()
        while (plan := draw.next_round()) is not None:
            draw.add(collect(plan.seeds, plan.sizes, plan.first_group_id, plan.first_traj_id))
        return draw.result()


class Draw:
    """One iteration's groups, drawn in rounds by the data layer and collected by the caller:

        draw = data.draw()
        while (plan := draw.next_round()) is not None:   # the planned groups, then replacements
            draw.add(trajectories collected for plan)
        kept, collected, metrics = draw.result()         # the sampler moves on one iteration

    The first round is the planned groups; under dynamic sampling each later round replaces the
    uninformative ones while --max-extra-groups allows."""

    def __init__(self, layer: DataLayer) -> None:
        self.layer, cfg = layer, layer.cfg
        self.planned = layer._plan(cfg.num_groups if not cfg.adaptive_group_size else layer.budget, layer.budget)
        self.target, self.first_round = len(self.planned), sum(g for _, g in self.planned)
        self.band = [layer.sampler.in_band(t) for t, _ in self.planned]
        self.kept: list[Trajectory] = []
        self.collected: list[Trajectory] = []
        self.n_kept = self.extra_groups = self.n_uninformative = 0

    def next_round(self) -> Round | None:
        """The groups to collect next, or None: the draw is complete."""
        if not self.planned:
            return None
        layer = self.layer
        return Round([t for t, _ in self.planned], [g for _, g in self.planned], layer.next_group_id, layer.next_traj_id)

    def add(self, trajs: list[Trajectory]) -> None:
        """The trajectories collected for the current round: the sampler learns their outcomes, the
        informative groups are kept, and the next round is planned (replacements) or none."""
        layer, cfg = self.layer, self.layer.cfg
        layer.next_group_id += len(self.planned)
        layer.next_traj_id += len(trajs)
        self.collected += trajs
        for group in _by_group(trajs):
            wins = sum(t.won for t in group)
            layer.sampler.update(group[0].seed, wins, len(group) - wins)
            useful = layer.informative(group)
            self.n_uninformative += not useful
            if not cfg.dynamic_sampling or useful:
                self.kept += group
                self.n_kept += 1
        missing = self.target - self.n_kept
        room = cfg.max_extra_groups - self.extra_groups
        if not cfg.dynamic_sampling or missing <= 0 or room <= 0:
            self.planned = []
        else:
            self.planned = layer._plan(min(missing, room), layer.budget)
            self.extra_groups += len(self.planned)

    def result(self) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
        """(groups to train on, every collected group, metrics); advances the sampler one iteration."""
        groups = _by_group(self.collected)
        metrics = {
            "rollout/frac_zero_std_groups": float(np.mean([zero_variance(g) for g in groups])),  # before filtering
            "data/frac_uninformative_groups": self.n_uninformative / max(len(groups), 1),  # every advantage zero
            "data/band_fraction": float(np.mean(self.band)) if self.band else 0.0,
            "data/mean_group_size": float(np.mean([len(g) for g in groups])),
            "data/groups_collected": float(len(groups)),
            "data/groups_kept": float(self.n_kept),
            "data/extra_groups": float(self.extra_groups),
            "data/extra_rollouts": float(len(self.collected) - self.first_round),
            "data/short_of_target": float(max(0, self.target - self.n_kept)),  # the cap was hit first
        }
        sampler = self.layer.sampler
        sampler.step()
        metrics.update(sampler.metrics())
        return self.kept, self.collected, metrics


def _by_group(trajs: list[Trajectory]) -> list[list[Trajectory]]:
    groups: dict[int, list[Trajectory]] = {}
    for t in trajs:
        groups.setdefault(t.group_id, []).append(t)
    return list(groups.values())


def task_sampler(cfg: DataConfig, num_tasks: int | None, seed: int, env_id: str, state: dict | None = None) -> TaskSampler:
    """The task pool (seeds 0..N-1: cfg.task_pool, else the env's `num_tasks`, else 256) and the sampler
    over it; continues the sampler of `state` (a resumed checkpoint's, or the one --model names) when it
    ran on the same env and pool."""
    pool = cfg.task_pool or num_tasks or DEFAULT_TASK_POOL
    sampler = TaskSampler(list(range(pool)), cfg, seed)
    if state is not None:
        same_tasks = state.get("config", {}).get("env") == env_id and state.get("sampler_pool") == pool
        if "sampler" in state and same_tasks:
            sampler.load_state_dict(state["sampler"])
    return sampler
