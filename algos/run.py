"""One training run's parts, built whole, and the phases the loop of algos/train.py calls.

`Run(cfg, resume)` builds everything a run holds before the loop starts: the torchrun world, the
config resolved (algos/resolve.py), the run directory (locked for one writer, algos/run_lock.py,
until `with Run(...)` ends), the policy and its sampling agent (algos/policy.py), the learner and
its KL reference, the collector, the data layer, the reward layer and the scorer audit, and puts
back a checkpoint's state when resuming (algos/checkpoint.py `restore`). Its methods are the
phases, one call each, in the order the loop calls them:

    warm_up     a fresh run: SFT on expert actions, the held-out baseline, iter_0
    rollout     draw groups, collect them (dynamic sampling may add some), rewards composed -> Batch
    advantages  one advantage per step row of the kept groups (GRPO / GiGPO / RLOO)
    update      PPO-clip on this rank's samples, or hold them (too few informative ones)   -> Update
    sync        the generation engine gets the new weights (checked on a probe batch)
    log         metrics, histograms, transcripts, the scorer audit, the progress bar
    stop_reason whether the loop ends, and why                                           -> Stop
    evaluate    held-out episodes;  save: a checkpoint;  finish: the last of both

A phase moves no loop state and ends nothing: everything the loop carries from one iteration
to the next is a `LoopState`, moved by its `advance` in the loop, saved in and restored from a
checkpoint as one unit (its "loop" entry).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from agents.model import load_model, resolve_model
from algos import checkpoint, distributed, lineage
from algos.collector import Collector, Step, Trajectory
from algos.config import Config, ConfigError, env_kwargs, flat
from algos.credit import compute_advantages, informative, informative_sample
from algos.data import DataLayer, task_sampler
from algos.evaluation import HeldOut, Lift, evaluate, paired_lift
from algos.learner import Learner
from algos.logprobs import Sample, training_samples
from algos.policy import build_policy
from algos.resolve import resolve
from algos.rollout_stats import rollout_metrics, transcript, transcript_markdown
from algos.run_dir import RunDir
from algos.run_lock import RunLock, check_output_dir
from algos.scoring import audit_hook, rescore, reward_layer
from algos.sft import warm_up_from_config
from algos.stats import Stats
from algos.weight_sync import probe_prompts, sync_backend
from envs.base import note_once

# time/<section>_s of every iteration; env, prompt, generate and parse are parts of rollout
TIME_SECTIONS = ("rollout", "env", "prompt", "generate", "parse", "advantage", "train", "sync", "log")


def _note_no_contrast() -> None:
    note_once("no update: in every group the rollouts scored alike (a model that refuses every action "
              "gives no contrast between its replies); warm it up on expert actions (--sft-steps) first")  # fmt: skip


class NumericError(RuntimeError):
    """Training cannot go on: every recent update had a non-finite loss or gradient."""


class RewardError(RuntimeError):
    """Training cannot go on: a reward source failed on every response for several iterations."""


@dataclass(frozen=True)
class Update:
    """What `Run.update` did: `applied` (the learner ran; else the samples were too few to learn from),
    the samples held for a later update (short_batch=accumulate), the update's metrics, and whether
    every optimizer step was skipped for a non-finite loss or gradient (`non_finite`)."""

    applied: bool
    held: list[Sample]
    stats: dict[str, float]
    non_finite: bool = False


@dataclass(frozen=True)
class Stop:
    """Why the loop ends after an iteration. `error`: the run cannot go on (exit 1); `message(path)`
    is its line, naming the checkpoint saved first. No error: the run is done (--max-env-steps)."""

    reason: str  # "budget", "numeric" or "reward"
    error: type[RuntimeError] | None = None
    message: Callable[[Path], str] | None = None


@dataclass
class LoopState:
    """What the loop carries from one iteration to the next (a checkpoint's "loop" entry, with the data
    layer's next ids): env steps so far, the run of non-finite updates, the latest held-out success,
    and the samples held for a later update (short_batch=accumulate), this rank's."""

    iteration: int = 0  # the last finished iteration
    env_steps: int = 0
    bad_updates: int = 0
    held_out: float | None = None
    held: list[Sample] = field(default_factory=list)
    failed_rewards: dict[str, int] = field(default_factory=dict)  # per source: iterations in a row it failed
    start: dict[int, list[bool]] = field(default_factory=dict)  # held-out task -> outcomes before RL
    start_at: int = 0  # the iteration of that baseline: 0, or where a fork that plays other episodes began

    def evaluated(self, result: HeldOut) -> None:
        """A held-out evaluation after the last finished iteration; the run's first (before RL: iteration 0,
        or a fork's start) is also the baseline that its final evaluation is paired with (`lift`)."""
        self.held_out = result.success_rate
        if not self.start:
            self.start, self.start_at = result.outcomes, self.iteration

    def lift(self, final: HeldOut) -> Lift | None:
        """What RL did: the final evaluation against the one before RL, task by task (None without one)."""
        return paired_lift(self.start, final.outcomes)

    def advance(self, it: int, batch: Batch, update: Update) -> None:
        """The one place the loop's state moves: iteration `it` is done with its env steps, its update
        held samples or ran (a run of updates whose every step was non-finite counts up), and each reward
        source that failed on every response extends its run (one that scored something ends it; one
        given nothing to score leaves it)."""
        self.iteration = it
        self.env_steps += sum(len(t.steps) for t in batch.collected)
        self.held = update.held
        if update.applied:
            self.bad_updates = self.bad_updates + 1 if update.non_finite else 0
        for name, failed in batch.reward_failed.items():
            if failed is not None:
                self.failed_rewards[name] = self.failed_rewards.get(name, 0) + 1 if failed else 0

    def to_dict(self, world) -> dict:
        """Every rank's held samples as plain lists, gathered (rank 0 writes them all)."""
        rows = [[s.prompt_ids, s.response_ids, s.advantage, s.old_logprobs, s.is_weights, s.mask] for s in self.held]
        return {"env_steps": self.env_steps, "bad_updates": self.bad_updates, "held_out": self.held_out,
                "held": distributed.gather(rows, world), "failed_rewards": self.failed_rewards,
                "start": self.start, "start_at": self.start_at}  # fmt: skip

    @classmethod
    def from_dict(cls, iteration: int, loop: dict, world) -> LoopState:
        ranks = loop.get("held", [])
        held = [Sample(*row) for row in ranks[world.rank]] if len(ranks) == world.size else []
        start = {int(seed): list(won) for seed, won in loop.get("start", {}).items()}
        return cls(iteration, loop.get("env_steps", 0), loop.get("bad_updates", 0), loop.get("held_out"), held,
                   dict(loop.get("failed_rewards", {})), start, loop.get("start_at", 0))  # fmt: skip


@dataclass
class Batch:
    """One iteration's rollouts: the groups kept for training, every group collected, the data layer's
    metrics, the kept groups' step rows, the group ids this rank collected (all of them in one process),
    the reward layer's metrics merged over ranks, and which reward sources failed on every response."""

    kept: list[Trajectory]
    collected: list[Trajectory]
    stats: dict[str, float]
    steps: list[Step]
    mine: set[int]
    rewards: dict[str, float]
    reward_failed: dict[str, bool | None]


class Run:
    """A run's parts (see the module docstring); `cfg` is resolved (see `resolve`)."""

    def __init__(self, cfg: Config, resume: lineage.Resume | None = None) -> None:
        self.world, self.device = distributed.init(cfg.device)  # one process unless torchrun
        world = self.world
        if not world.main:
            distributed.quiet_progress()  # one set of progress bars: rank 0's
        if world.main:
            resolve_model(cfg.model)  # the tiny model is built once, by rank 0
        distributed.barrier(world)
        self.cfg = resolve(cfg, world, self.device)  # every unset option's value for this run, once
        self.lock = self._claim(resume)  # one writer per run directory, before anything there is read or written
        try:
            self._build(resume)
        except BaseException:
            self.release()
            raise

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _claim(self, resume: lineage.Resume | None) -> RunLock | None:
        """Rank 0 locks the run directory (and, for a fresh run with --overwrite, empties it); every rank
        stops with its error when it cannot."""
        cfg, lock, error = self.cfg, None, None
        if self.world.main:
            try:
                in_place = resume is not None and not resume.fork
                check_output_dir(cfg.output_dir, in_place, cfg.overwrite)
                lock = RunLock.take(cfg.output_dir)
                if cfg.overwrite and not in_place and (removed := lock.empty()):
                    self.say(f"--overwrite: emptied {cfg.output_dir} ({removed} entries) for this run")
            except ConfigError as e:
                error = str(e)
                if lock is not None:
                    lock.release()
        error = distributed.broadcast(error, self.world)
        if error:
            raise ConfigError(error)
        return lock

    def release(self) -> None:
        """Unlock the run directory: at the end, or on an error (a kill -9 leaves a stale lock, which the next
        run takes over). The env workers are stopped too (closing twice is harmless)."""
        if hasattr(self, "collector"):  # built (an error may come before it is)
            self.collector.close()
        if self.lock is not None:
            self.lock.release()

    def _build(self, resume: lineage.Resume | None) -> None:
        """Every part, whole: the policy and its agent, the run directory, the learner, the collector, the
        data and reward layers and the audit; a resumed checkpoint's state put back (algos/checkpoint.py).
        A resume records what it changed (resumes.jsonl); a fork starts its own directory (parent.json)."""
        cfg, world, device = self.cfg, self.world, self.device
        self.forked = bool(resume and resume.fork)
        source = resume.source if resume else None
        self.ckpt, state = checkpoint.resume_point(source, cfg, world, fork=self.forked)  # raises Finished: nothing to do
        self.loop = LoopState.from_dict(state["iteration"], state.get("loop", {}), world) if state else LoopState()
        self.model, self.tokenizer, self.agent = build_policy(replace(cfg, model=str(self.ckpt or cfg.model)), world, device)
        in_place = self.ckpt is not None and not self.forked
        self.dir = RunDir(cfg.output_dir, flat(cfg), purge_step=self.loop.iteration + 1 if in_place else None,
                          write=world.main)  # fmt: skip
        changed = lineage.changes(resume.saved, cfg) if resume else {}
        if resume and world.main:
            if self.forked:
                lineage.record_fork(self.dir.path, source, self.ckpt, self.loop.iteration, changed)
                checkpoint.adopt_warm_up(source, self.dir.path)  # the KL reference and the lift's baseline model
            else:
                lineage.record_resume(self.dir.path, self.loop.iteration, changed)
            if changed:
                self.say(f"{'fork' if self.forked else 'resume'} changes {lineage.describe(changed)}")
        if self.forked and lineage.rollouts_changed(changed):
            self.loop.start, self.loop.held = {}, []  # another task or prompt: the fork's own baseline, no old samples
        self.say(f"run directory: {self.dir.path}  (tensorboard --logdir {self.dir.path})")
        if world.enabled:
            self.say(f"{world.size} ranks ({cfg.scaling.parallel}), {cfg.data.num_groups} groups per iteration in all")
        self.learner = Learner.for_run(self.model, cfg, self.tokenizer.pad_token_id, len(self.tokenizer),
                                       ref_model=self._reference(), seed=cfg.seed + world.rank, world=world,
                                       adapter_reference=bool(cfg.scaling.lora_rank))  # fmt: skip
        self.collector = Collector(cfg.env, -(-cfg.data.num_groups // world.size), cfg.data.group_size, env_kwargs(cfg),
                                   cfg.workers)  # fmt: skip
        sampler = task_sampler(cfg.data, self.collector.pool.num_tasks, cfg.seed, cfg.env,
                               state if state is not None else checkpoint.model_state(cfg.model))  # fmt: skip
        self.data = DataLayer(cfg.data, sampler, partial(informative, cfg.algo, cfg.advantages))
        self.rewards = reward_layer(cfg, device)  # --reward: what a step earns
        self.audit = audit_hook(cfg, self.rewards, self.dir.path / "reward_audit.json") if world.main else None
        if state:  # everything that decides what happens next, RNGs last
            checkpoint.restore(state, world, self.learner, self.data, self.agent.backend)
            if self.audit:
                self.audit.history = checkpoint.audit_history(self.dir.path, self.loop.iteration)
        self.clock = self.agent.stopwatch  # env, prompt, generate and parse seconds come from the rollouts

    def _reference(self):
        """The frozen KL reference (beta > 0, full fine-tuning): the policy RL starts from, which is the
        warmed-up model (a fresh run copies it in after the warm-up; a resumed one loads the warm-up's
        checkpoint). None when there is none to keep: beta = 0, or LoRA (the base with its adapter off)."""
        cfg = self.cfg
        if not cfg.learner.beta > 0 or cfg.scaling.lora_rank:
            return None
        warm_ckpt = self.dir.path / "checkpoints" / "iter_0"
        source = warm_ckpt if self.ckpt and warm_ckpt.exists() else resolve_model(cfg.model)
        ref = load_model(str(source), self.device, getattr(torch, cfg.dtype), cfg.trust_remote_code)
        if cfg.scaling.parallel == "fsdp":
            ref = distributed.wrap(ref.eval().requires_grad_(False), "fsdp", self.world)
        return ref

    def say(self, text: str) -> None:
        if self.world.main:
            print(text, file=sys.stderr)

    # ---- warm-up: SFT on expert demonstrations and the held-out baseline ---------------
    def warm_up(self) -> str | None:
        """A fresh run: SFT on the env's expert actions (the KL reference becomes the warmed-up policy),
        the held-out baseline, and the warm-up's checkpoint (iter_0). A resumed run has done all that.
        Returns what stops the run before RL (the engine does not serve the warmed-up weights), or None."""
        cfg, world, loop = self.cfg, self.world, self.loop
        if self.forked:  # a new run from the parent's checkpoint: its own baseline if it needs one, its first checkpoint
            self.say(f"forked after iteration {loop.iteration} from {self.ckpt}")
            if cfg.log.eval_episodes and not loop.start:
                loop.evaluated(self.evaluate(loop.iteration))
                self.say(f"success at the fork: {loop.held_out:.1%}")
            self.save(loop.iteration)
            return None
        if self.ckpt:
            self.say(f"resuming after iteration {loop.iteration} from {self.ckpt}")
            return None
        if cfg.sft.sft_steps > 0:
            demos, losses = warm_up_from_config(cfg, self.agent, self.model, len(self.tokenizer), world)
            self.dir.log(0, {"sft/loss": float(np.mean(losses[-10:])), "sft/demos": len(demos)})
            probe = probe_prompts([d.prompt_ids for d in demos], cfg.engine.sync_probe_size)
            problem = sync_backend(self.agent, self.model, cfg, self.dir, 0, probe,
                                   check=cfg.engine.sync_check_every > 0, world=world)  # fmt: skip
            if problem:
                return problem
            self.learner.anchor_reference()
        if cfg.log.eval_episodes:
            loop.evaluated(self.evaluate(0))
            self.say(f"success {'after warm-up' if cfg.sft.sft_steps else 'before RL'}: {loop.held_out:.1%}")
        if cfg.sft.sft_steps > 0:  # the warmed-up model: a baseline, and a start that skips SFT
            self.save(0)
        return None

    def iterations(self) -> tqdm:
        """The iterations still to run, as a progress bar (a resumed run starts after its checkpoint)."""
        cfg = self.cfg
        self.bar = tqdm(range(self.loop.iteration + 1, cfg.iterations + 1), desc=f"{cfg.algo} {cfg.env}",
                        initial=self.loop.iteration, total=cfg.iterations, dynamic_ncols=True)  # fmt: skip
        self.last_logged = time.perf_counter()
        return self.bar

    # ---- the phases of an iteration ---------------------------------------------------
    def rollout(self) -> Batch:
        """This iteration's groups: drawn by the data layer, collected (this rank's share under torchrun,
        every rank then holding all of them), rewards composed; uninformative groups replaced while the
        cap allows."""
        self.clock.lap()  # drop what evaluation and checkpoints put on it
        mine: set[int] = set()
        with self.clock.section("rollout"):
            draw = self.data.draw()
            while (plan := draw.next_round()) is not None:
                trajs, owned = distributed.collect_share(self._collect, self.collector.num_envs, plan.seeds, plan.sizes,
                                                         plan.first_group_id, plan.first_traj_id, self.world)  # fmt: skip
                draw.add(trajs)
                mine |= owned
            kept, collected, stats = draw.result()
        rewards = Stats.merge_values(distributed.gather(self.rewards.metrics(), self.world),
                                     total=lambda key: key.endswith("errors"))  # over ranks: error counts add up
        return Batch(kept, collected, stats, [s for t in kept for s in t.steps], mine, rewards,
                     self.rewards.failed(rewards))  # fmt: skip

    def _collect(self, seeds: list[int], sizes: list[int], first_group_id: int, first_traj_id: int):
        """Groups played here and scored by the reward layer."""
        return rescore(self.rewards, self.collector.collect(self.agent, seeds, first_traj_id, sizes, first_group_id))

    def advantages(self, batch: Batch) -> tuple[np.ndarray, dict[str, float]]:
        """Every rank computes them for all groups (the statistics are per group); each trains on its own."""
        if not batch.steps:  # none when dynamic sampling found no informative group before its cap
            return np.zeros(0), {}
        with self.clock.section("advantage"):
            return compute_advantages(self.cfg.algo, self.cfg.advantages, batch.steps)

    def update(self, batch: Batch, adv: np.ndarray) -> Update:
        """PPO-clip on this rank's samples (and any held ones), or, with too few informative samples, hold
        them (short_batch=accumulate) or drop them. Reads the loop state, changes nothing of it."""
        cfg, held = self.cfg, self.loop.held
        if not batch.steps:  # dynamic sampling kept no group
            _note_no_contrast()
            return Update(False, held, {"train/update_skipped": 1.0, "train/held_samples": float(len(held))})
        samples = held + training_samples(batch.kept, adv, batch.mine, cfg.sampling.context == "chat")
        useful = distributed.all_sum([sum(informative_sample(x) for x in samples)], self.world)[0]
        if not useful:  # the same without dynamic sampling
            _note_no_contrast()
        if useful < max(cfg.learner.min_update_samples, 1):  # too little to learn from: hold it or drop it
            held = samples if cfg.learner.short_batch == "accumulate" else []
            return Update(False, held, {"train/update_skipped": 1.0, "train/held_samples": float(len(held))})
        self.agent.backend.release()  # GPU vLLM sleep mode: the update gets the KV cache's memory
        with self.clock.section("train"):
            stats = {**self.learner.update(samples), "train/update_skipped": 0.0}
        stats["train/informative_samples"] = float(useful)
        return Update(True, [], stats, non_finite=stats.get("train/skipped_frac") == 1.0)

    def sync(self, it: int, batch: Batch) -> str | None:
        """The engine gets the new weights; every --sync-check-every iterations a probe batch checks it.
        Returns what is wrong when the engine does not serve them (the run cannot go on), or None."""
        engine = self.cfg.engine
        check = engine.sync_check_every > 0 and it % engine.sync_check_every == 0
        with self.clock.section("sync"):
            probe = probe_prompts([s.prompt_ids for s in batch.steps], engine.sync_probe_size)
            return sync_backend(self.agent, self.model, self.cfg, self.dir, it, probe, check, self.world)

    def log(self, it: int, batch: Batch, adv: np.ndarray, stats: dict[str, float], started: float) -> dict[str, float]:
        """The iteration's metrics line (rollouts, rewards, data, advantages, update, memory, time), its
        histograms and transcripts, the scorer audit when due, and the progress bar; the metrics."""
        cfg, world, loop = self.cfg, self.world, self.loop
        metrics = {**rollout_metrics(batch.collected), **batch.rewards, **batch.stats, **stats}
        metrics["data/env_steps_total"] = float(loop.env_steps)
        per_rank = distributed.gather(distributed.peak_memory_gib(self.device), world)
        metrics.update({f"memory/{k}": max(m[k] for m in per_rank) for k in per_rank[0]})  # the busiest rank
        with self.clock.section("log"):  # the final metrics line below is written after the clock stops
            self.dir.log_histogram(it, "data/pass_rates", self.data.sampler.pass_rates())
            if cfg.log.transcript_every and it % cfg.log.transcript_every == 0:
                by_step = {(s.traj_id, s.t): float(a) for s, a in zip(batch.steps, adv)}
                for traj in (batch.kept or batch.collected)[: cfg.log.transcripts]:  # none kept: no advantages
                    record = transcript(traj, by_step, self.tokenizer.decode, cfg.sampling.context == "chat")
                    self.dir.log_transcript(it, record, transcript_markdown(record))
        now = time.perf_counter()
        spent = self.clock.lap()
        metrics.update({f"time/{k}_s": spent.get(k, 0.0) for k in TIME_SECTIONS})
        metrics["time/iteration_s"] = now - started
        metrics["time/wall_s"] = now - self.last_logged  # since the last iteration's log: evaluation, saves and all
        self.last_logged = now
        self.dir.log(it, metrics)
        if self.audit and it % cfg.rewards.audit_every == 0:
            self.dir.log(it, self.audit(it, batch.collected))  # honeypots and probes mixed with the answers
        shown = {"success": f"{metrics['rollout/success_rate']:.2f}", "loss": f"{metrics.get('train/loss', 0):.3f}"}
        held_out = {"eval": f"{loop.held_out:.2f}"} if loop.held_out is not None else {}
        self.bar.set_postfix(**shown, **held_out)
        return metrics

    def stop_reason(self) -> Stop | None:
        """Whether the loop ends after this iteration, and why:
        - numeric: --max-bad-updates updates in a row had every step skipped for a non-finite loss or
          gradient (skipped steps left the weights good);
        - reward: a trained-on --reward source failed on every response for --max-failed-reward-iterations
          in a row (the loop's count, from the metrics merged over ranks, so every rank stops alike): a
          run whose reward is missing must not go on as if it learned;
        - budget: --max-env-steps env steps are spent (a normal end)."""
        loop, learner = self.loop, self.cfg.learner
        if learner.max_bad_updates and loop.bad_updates >= learner.max_bad_updates:
            n = loop.bad_updates
            return Stop("numeric", NumericError, lambda path: f"{n} updates in a row had a non-finite loss or "
                        f"gradient and were skipped; the last good weights are saved in {path}")  # fmt: skip
        limit = self.cfg.rewards.max_failed_reward_iterations
        runs = loop.failed_rewards
        failed = [name for name, n in runs.items() if limit and n >= limit]
        if failed:
            name, first = failed[0], self.rewards.first_error.get(failed[0], "unknown")
            return Stop("reward", RewardError, lambda path: f"--reward source {name!r} failed on every response for "
                        f"{runs[name]} iterations in a row (first error: {first}); the weights are saved in {path}; "
                        "fix the scorer, or --max-failed-reward-iterations 0 to go on")  # fmt: skip
        if self.cfg.max_env_steps and loop.env_steps >= self.cfg.max_env_steps:
            return Stop("budget")
        return None

    def due(self, every: int, it: int) -> bool:
        """Whether an every-N-iterations job runs after iteration `it` (the last one has its own)."""
        return bool(every) and it % every == 0 and it < self.cfg.iterations

    def evaluate(self, it: int) -> HeldOut:
        """The held-out episodes (the same seeds every time), logged at iteration `it`."""
        result = evaluate(self.agent, self.cfg, self.cfg.log.eval_episodes, self.world)
        self.dir.log(it, result.metrics)
        self.dir.log_held_out(it, result.record())
        return result

    def save(self, it: int) -> Path:
        """A checkpoint at iteration `it`: weights, and after RL iterations (it > 0; iter_0 is the warm-up's
        model and its held-out baseline) the optimizer, sampler and loop state."""
        rl = it > 0
        loop = {**self.loop.to_dict(self.world), "next_group_id": self.data.next_group_id,
                "next_traj_id": self.data.next_traj_id} if rl else {"held_out": self.loop.held_out,
                                                                    "start": self.loop.start, "start_at": self.loop.start_at}  # fmt: skip
        return checkpoint.save(self.dir, it, self.model, self.tokenizer, self.learner if rl else None, self.cfg,
                               self.data.sampler if rl else None, self.agent, loop, self.world)  # fmt: skip

    def finish(self) -> RunDir:
        """The final evaluation and checkpoint, then everything closed."""
        self.collector.close()
        last = self.loop.iteration
        lift = None
        warm_up_only = self.cfg.iterations == 0  # warm_up() evaluated and saved it: nothing trained since
        if self.cfg.log.eval_episodes and not warm_up_only:
            final = self.evaluate(last)
            self.loop.evaluated(final)  # the final checkpoint records it
            self.say(f"success after RL: {self.loop.held_out:.1%}")
            if lift := self.loop.lift(final):  # the same tasks before and after RL, paired
                self.dir.log(last, lift.metrics("eval/rl_lift"))
        path = self.dir.path / "checkpoints" / "iter_0" if warm_up_only else self.save(last)
        self.say(f"checkpoint: {path}")
        if lift:  # the run's last line
            fork = " (the fork's start)" if self.forked else ""  # else a run that evaluated nothing before RL
            since = (f"iteration {self.loop.start_at}{fork}" if self.loop.start_at else
                     "the warm-up" if self.cfg.sft.sft_steps else "the start")  # fmt: skip
            self.say(lift.line(f"RL's lift over {since}"))
        self.dir.write_json("memory.json", {"ranks": distributed.gather(distributed.peak_memory_gib(self.device),
                                                                        self.world)})  # fmt: skip
        self.dir.close()
        self.agent.backend.close()  # a vLLM engine leaves the process group before main() destroys it
        return self.dir
