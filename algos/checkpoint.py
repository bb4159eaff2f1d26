"""Checkpoints that a run can resume from exactly: what is saved, and how it is put back.

    python -m algos.train --resume runs/RUN        # continue from the newest complete checkpoint

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
`.iter_N.tmp-*` folder, which resume removes. On resume, metrics.jsonl and transcripts.jsonl
are cut back to the checkpoint's iteration and TensorBoard purges later events, so every
iteration appears once. With the HF backend on CPU the resumed iterations reproduce an
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
from agents.model import merged_state_dict
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
    full = distributed.full_state_dict(model, rank0_only=True)  # gathered once (FSDP); else the model's own
    weights = full if distributed.is_sharded(model) else None
    merged = merged_state_dict(full, getattr(model, "module", model)) if cfg.scaling.lora_save_merged else None
    path = run.save_checkpoint(it, model, tokenizer, state, weights, merged)
    if world.main:
        prune(run.path, cfg.log.keep_checkpoints)
    distributed.barrier(world)  # nobody reads or prunes a checkpoint before rank 0 has written it
    return path


def rank_rng(state: dict, world: World) -> dict:
    """This rank's RNG states from a checkpoint (rank 0's when it was saved by one process)."""
    ranks = state.get("rng_ranks") or []
    return ranks[world.rank] if len(ranks) == world.size else state["rng"]


def resume_point(run_dir: Path | None, world: World = SINGLE, parallel: str = "none") -> tuple[Path | None, dict | None]:
    """The newest complete checkpoint of a run and its trainer state; partial writes are removed
    (by rank 0; every rank reads the same checkpoint)."""
    if run_dir is None:
        return None, None
    if world.main:
        for stray in remove_partial(run_dir):
            print(f"removed an unfinished checkpoint write: {stray}", file=sys.stderr)
    found = checkpoints(run_dir)
    if not found:
        raise ConfigError(f"--resume {run_dir}: no complete checkpoint in {run_dir}/checkpoints "
                          "(runs save one after the warm-up and every --save-every N iterations)")  # fmt: skip
    iteration, ckpt = found[-1]
    state = torch.load(ckpt / TRAINER_STATE, weights_only=True)
    saved = state.get("world", {"size": 1, "parallel": "none"})
    here = {"size": world.size, "parallel": parallel if world.enabled else "none"}
    if iteration > 0 and saved != here:  # the optimizer state and the per-rank RNGs are laid out per rank
        raise ConfigError(f"--resume {run_dir}: the run was saved by {saved['size']} process(es) ({saved['parallel']}); "
                          f"resume it the same way (got {here['size']}, {here['parallel']}), or start a new run from "
                          f"{ckpt} with --model")  # fmt: skip
    if world.main:
        truncate_logs(run_dir, iteration)
    distributed.barrier(world)
    return ckpt, state


def model_state(model: str) -> dict | None:
    """The trainer state beside a --model folder that is a checkpoint of this trainer (else None):
    its task sampler carries over to a run that starts from it."""
    path = os.path.join(os.path.expanduser(model), TRAINER_STATE)
    return torch.load(path, weights_only=True) if os.path.exists(path) else None
