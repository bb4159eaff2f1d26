"""Checkpoints that a run can resume from exactly: what is saved, and how it is put back.

    python -m algos.train --resume runs/RUN        # continue from the newest intact checkpoint

A checkpoint (`checkpoints/iter_N/`) holds the model in Hugging Face format (safetensors) and
`trainer_state.pt` (read with `torch.load(weights_only=True)`):

    iteration, config          where the run stood and how it was configured
    optimizer, scheduler       AdamW moments and the learning-rate schedule position
    sampler, sampler_pool      the task sampler: pass-rate posteriors and its own RNG
    rng                        python, numpy and torch global RNGs, the HF backend's sampling
                               generator, the learner's mini-batch shuffler
    loop                       env steps so far, ids of the next group and trajectory, the run
                               of skipped updates, the latest held-out success

RunDir writes each checkpoint into a temporary folder, fsyncs it and renames it into place,
so a process killed mid-write leaves the previous checkpoints intact and at most a stray
`.iter_N.tmp-*` folder, which resume removes. Resume checks the newest checkpoint before using
it (`check`: trainer_state.pt loads, the safetensors files open and cover their length, the tokenizer
is whole and works) and falls back to the newest intact one, saying which and why; a run whose newest
checkpoint is at its last iteration is finished (`Finished`: nothing to do). On resume, metrics.jsonl
and transcripts.jsonl are cut back to the checkpoint's iteration and TensorBoard purges later events,
so every iteration appears once. With the HF backend on CPU the resumed iterations reproduce an
uninterrupted run's metrics exactly; vLLM's sampler state lives in the engine and is not
restored (the resumed run is statistically, not bitwise, the same).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

from agents.backend import Backend
from agents.model import builtin_path, check_model_dir, is_builtin, is_local_path
from agents.weights import full_state_dict, is_sharded, merged_state_dict
from algos import distributed
from algos.config import ConfigError, flat
from algos.distributed import SINGLE, World
from algos.learner import Learner
from algos.run_dir import TRAINER_STATE, RunDir


def rng_state(backend: Backend | None = None, learner=None) -> dict:
    state = {
        "python": random.getstate(),
        "numpy": [v.tolist() if isinstance(v, np.ndarray) else v for v in np.random.get_state()],
        "torch": torch.get_rng_state(),
    }
    if getattr(backend, "generator", None) is not None:
        state["backend"] = backend.generator.get_state()
    if learner is not None:
        state["learner"] = learner.rng.getstate()
    return state


def restore_rng(state: dict, backend: Backend | None = None, learner=None) -> None:
    random.setstate(_tuples(state["python"]))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "backend" in state and getattr(backend, "generator", None) is not None:
        backend.generator.set_state(state["backend"])
    if "learner" in state and learner is not None:
        learner.rng.setstate(_tuples(state["learner"]))


def _tuples(value):
    """random.setstate wants the tuples it gave; a saved state may come back with lists."""
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first (a folder exists only once its rename completed)."""
    found = []
    for path in (Path(run_dir) / "checkpoints").glob("iter_*"):
        if path.name[5:].isdigit() and (path / TRAINER_STATE).is_file():
            found.append((int(path.name[5:]), path))
    return sorted(found)


def remove_partial(run_dir: Path) -> list[Path]:
    """Folders of writes that never completed (the process died before the rename)."""
    stray = list((Path(run_dir) / "checkpoints").glob(".iter_*.tmp-*"))
    for path in stray:
        shutil.rmtree(path, ignore_errors=True)
    return stray


def prune(run_dir: Path, keep: int) -> None:
    """Keep the newest `keep` RL checkpoints (iter_0, the warm-up, always stays); 0 keeps all."""
    if keep <= 0:
        return
    rl = [(i, p) for i, p in checkpoints(run_dir) if i > 0]
    for _, path in rl[:-keep]:
        shutil.rmtree(path, ignore_errors=True)


def truncate_logs(run_dir: Path, iteration: int) -> None:
    """Drop metrics and transcript rows written after `iteration` (by the run that died)."""
    for name in ("metrics.jsonl", "transcripts.jsonl"):
        path = Path(run_dir) / name
        if not path.exists():
            continue
        kept = []
        for line in path.read_text().splitlines():
            try:
                if json.loads(line)["iteration"] <= iteration:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):  # a line cut by the kill
                continue
        path.write_text("".join(line + "\n" for line in kept))


def audit_history(run_dir: Path, iteration: int) -> list[dict]:
    path = Path(run_dir) / "reward_audit.json"
    if not path.exists():
        return []
    try:
        return [a for a in json.loads(path.read_text())["audits"] if a["iteration"] <= iteration]
    except (json.JSONDecodeError, KeyError, TypeError):
        return []


def save(run: RunDir, it: int, model, tokenizer, learner: Learner | None, cfg, sampler=None, agent=None,
         loop: dict | None = None, world: World = SINGLE):  # fmt: skip
    """A checkpoint with everything --resume needs (algos/checkpoint.py); keeps the newest --keep-checkpoints.
    Under torchrun every rank calls this: full weights and optimizer state are gathered (FSDP),
    every rank's RNGs collected, and rank 0 writes."""
    state = {"iteration": it, "config": flat(cfg), "loop": loop or {},
             "world": {"size": world.size, "parallel": cfg.scaling.parallel if world.enabled else "none"}}  # fmt: skip
    rngs = distributed.gather(rng_state(agent.backend if agent else None, learner), world)
    state["rng"] = rngs[0]
    if world.enabled:
        state["rng_ranks"] = rngs
    if learner is not None:
        state["optimizer"] = distributed.full_optimizer_state(learner.model, learner.optimizer)
        state["scheduler"] = learner.scheduler.state_dict()
    if sampler is not None:
        state["sampler"], state["sampler_pool"] = sampler.state_dict(), len(sampler.tasks)
    full = full_state_dict(model, rank0_only=True)  # gathered once (FSDP); else the model's own
    weights = full if is_sharded(model) else None
    merged = merged_state_dict(full, getattr(model, "module", model)) if cfg.scaling.lora_save_merged else None
    path = run.save_checkpoint(it, model, tokenizer, state, weights, merged)
    if world.main:
        prune(run.path, cfg.log.keep_checkpoints)
    distributed.barrier(world)  # nobody reads or prunes a checkpoint before rank 0 has written it
    return path


def restore(state: dict, world: World, learner: Learner, data, backend: Backend) -> None:
    """Put back what a checkpoint decides about what happens next: the optimizer and the learning-rate
    schedule (an RL checkpoint's; iter_0 holds the warm-up's model only), the data layer's next group
    and trajectory ids, and, last, every RNG (this rank's)."""
    loop, rl = state.get("loop", {}), "optimizer" in state
    if rl:
        learner.load_state(state["optimizer"], state["scheduler"])
    data.next_group_id, data.next_traj_id = loop.get("next_group_id", 0), loop.get("next_traj_id", 0)
    restore_rng(rank_rng(state, world), backend, learner if rl else None)


def rank_rng(state: dict, world: World) -> dict:
    """This rank's RNG states from a checkpoint (rank 0's when it was saved by one process)."""
    ranks = state.get("rng_ranks") or []
    return ranks[world.rank] if len(ranks) == world.size else state["rng"]


class Finished(Exception):
    """--resume of a run that has nothing left to do: its newest checkpoint is at its last iteration."""


def check(path: Path, load_state: bool = True) -> dict | None:
    """A model folder's trainer state (None if it has none) once its files check out: trainer_state.pt
    loads with weights_only=True (`load_state=False`: memory-mapped, tensors unread) and the model's
    files, its tokenizer's included, are intact (agents.model.check_model_dir). Raises ValueError (one line) naming what is damaged."""
    path = Path(path)
    state = None
    if (path / TRAINER_STATE).is_file():
        try:
            state = torch.load(path / TRAINER_STATE, weights_only=True, mmap=not load_state)
        except Exception as e:  # a truncated zip, a bad pickle: any failure means the file cannot be used
            why = str(e).splitlines()[0].split(". ")[0] if str(e) else type(e).__name__  # torch's first sentence
            raise ValueError(f"{path / TRAINER_STATE} does not load ({why})") from None
        if not isinstance(state, dict) or "iteration" not in state:
            raise ValueError(f"{path / TRAINER_STATE} is not a trainer state (no iteration)")
    check_model_dir(path)
    return state


def check_model(model: str) -> None:
    """--model, when it names a local folder or a built-in model already built into its cache folder: its
    files are intact and its tokenizer works (`check`, tensors unread). A hub id's tokenizer is checked once
    it is downloaded (agents.model.load_tokenizer). Raises ConfigError."""
    if is_builtin(model):
        path = builtin_path(model)
        if not path.exists():  # built by the run, whole
            return
    elif is_local_path(model):
        path = Path(model).expanduser()
    else:
        return
    try:
        check(path, load_state=False)
    except ValueError as e:  # "--model DIR: the tokenizer ...", not "--model DIR: DIR: the tokenizer ..."
        why = str(e) if is_builtin(model) else str(e).removeprefix(f"{path}: ")
        raise ConfigError(f"--model {model}: {why}") from None


def newest_intact(run_dir: Path) -> tuple[Path, dict]:
    """The newest complete checkpoint that checks out, and its trainer state; says in one line which
    newer ones were skipped and why. Raises ConfigError when none does."""
    damaged = []
    for _, ckpt in reversed(checkpoints(run_dir)):
        try:
            state = check(ckpt)
        except ValueError as e:
            damaged.append(f"{ckpt.name}: {e}")
            continue
        if damaged:
            print(f"resuming from {ckpt.name}, the newest intact checkpoint; skipped {'; '.join(damaged)}",
                  file=sys.stderr)  # fmt: skip
        return ckpt, state
    raise ConfigError(f"--resume {run_dir}: no intact checkpoint ({'; '.join(damaged)}); start it afresh with "
                      "--overwrite, or pick a new --output-dir")  # fmt: skip


def resume_point(run_dir: Path | None, cfg, world: World = SINGLE, fork: bool = False) -> tuple[Path | None, dict | None]:
    """The newest intact checkpoint of a run and its trainer state (rank 0 checks them; every rank
    reads the one it picked); partial writes are removed and the logs cut back to it, unless the run is
    forked (`fork`: its directory is only read). Raises Finished when that checkpoint ends the run
    (--iterations reached, or the --max-env-steps budget spent)."""
    if run_dir is None:
        return None, None
    if not checkpoints(run_dir):
        raise ConfigError(f"--resume {run_dir}: no complete checkpoint in {run_dir}/checkpoints "
                          "(runs save one after the warm-up and every --save-every N iterations)")  # fmt: skip
    picked = {}
    if world.main:
        try:
            ckpt, state = newest_intact(run_dir)
            picked = {"name": ckpt.name}
        except ConfigError as e:
            picked = {"error": str(e)}
    picked = distributed.broadcast(picked, world)  # every rank stops, or resumes from the same one
    if "error" in picked:
        raise ConfigError(picked["error"])
    if not world.main:
        ckpt = Path(run_dir) / "checkpoints" / picked["name"]
        state = torch.load(ckpt / TRAINER_STATE, weights_only=True)
    iteration = state["iteration"]
    env_steps = state.get("loop", {}).get("env_steps", 0)
    if iteration >= cfg.iterations:
        what = "nothing to fork" if fork else "nothing to do"
        raise Finished(f"{run_dir} is finished: its newest checkpoint is at iteration {iteration} of --iterations "
                       f"{cfg.iterations}; {what} (a larger --iterations trains on)")  # fmt: skip
    if iteration > 0 and cfg.max_env_steps and env_steps >= cfg.max_env_steps:
        raise Finished(f"{run_dir} is finished: it spent its budget of --max-env-steps {cfg.max_env_steps} "
                       f"({env_steps} env steps); nothing to do (a larger --max-env-steps trains on)")  # fmt: skip
    saved = state.get("world", {"size": 1, "parallel": "none"})
    here = {"size": world.size, "parallel": cfg.scaling.parallel if world.enabled else "none"}
    if iteration > 0 and saved != here:  # the optimizer state and the per-rank RNGs are laid out per rank
        raise ConfigError(f"--resume {run_dir}: the run was saved by {saved['size']} process(es) ({saved['parallel']}); "
                          f"resume it the same way (got {here['size']}, {here['parallel']}), or start a new run from "
                          f"{ckpt} with --model")  # fmt: skip
    if world.main and not fork:
        for stray in remove_partial(run_dir):
            print(f"removed an unfinished checkpoint write: {stray}", file=sys.stderr)
        truncate_logs(run_dir, iteration)
    distributed.barrier(world)
    return ckpt, state


def adopt_warm_up(parent: Path, run_dir: Path) -> None:
    """A fork's copy of its parent's warm-up checkpoint (iter_0: the KL reference a resumed run loads),
    hard-linked where the filesystem allows (checkpoint files are never changed in place), else copied."""
    source = Path(parent) / "checkpoints" / "iter_0"
    target = Path(run_dir) / "checkpoints" / "iter_0"
    if not source.is_dir() or target.exists():
        return
    try:
        shutil.copytree(source, target, copy_function=os.link)
    except OSError:  # another filesystem
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)


def model_state(model: str) -> dict | None:
    """The trainer state beside a --model folder that is a checkpoint of this trainer (else None):
    its task sampler carries over to a run that starts from it."""
    path = os.path.join(os.path.expanduser(model), TRAINER_STATE)
    return torch.load(path, weights_only=True) if os.path.exists(path) else None
