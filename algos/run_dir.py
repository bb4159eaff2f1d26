"""The run directory (docs/design.md, Run directory): config, metrics, TensorBoard, transcripts, checkpoints.

DIR/config.yaml              the fully resolved config
DIR/metrics.jsonl            JSON rows of iteration + scalar tags: each iteration's row, plus
                             warm-up, sync-check, evaluation and audit rows
DIR/events.out.tfevents.*    TensorBoard scalars (same tags) and transcripts as text (--report-to tensorboard)
DIR/wandb_run.json           the W&B run's id, which --resume continues (--report-to wandb, algos/reporters.py)
DIR/transcripts.jsonl        sampled full episodes
DIR/held_out.jsonl           every held-out evaluation's episodes: a row of iteration + columns task, won, steps
                             (what a paired comparison between two evaluations or two runs needs)
DIR/checkpoints/iter_N/      Hugging Face format (safetensors) + trainer_state.pt
DIR/reward_audit.json        every scorer audit of the run; DIR/memory.json: peak memory per rank
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from algos.reporters import WandbReporter, report_to
from envs.base import StorageError, note_once, write_fault

TRAINER_STATE = "trainer_state.pt"  # marks a checkpoint written by this trainer
# The longest path a run writes under its directory (a temp checkpoint of save_checkpoint, a merged model's shard):
# an --output-dir must leave room for it below the filesystem's path limit (algos/run_lock.py check_output_dir).
LONGEST_PATH = "checkpoints/.iter_1000000.tmp-4194304-1800000000000000000/merged/model-00001-of-00002.safetensors"


def read_metrics(run: str | Path) -> list[dict]:
    """The rows of a run's metrics.jsonl, in order (one per iteration, plus evaluation and audit rows).
    A last line cut by a kill is skipped with a note; a bad line anywhere else raises ValueError
    naming the file and the line."""
    path = Path(run) / "metrics.jsonl"
    lines = path.read_text().splitlines()
    last = max((n for n, line in enumerate(lines, 1) if line.strip()), default=0)
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if n == last:  # what a kill during a write leaves
                note_once(f"{path}: its last line ({n}) is cut, as a killed run leaves it; skipped")
                break
            where = e.msg if e.msg.endswith(" at") else f"{e.msg} at"  # json's own "line 1" would mislead
            raise ValueError(f"{path}, line {n}: not JSON ({where} column {e.colno})") from None
        if not isinstance(row, dict) or "iteration" not in row:
            raise ValueError(f"{path}, line {n}: not a metrics row {{\"iteration\": N, ...}}")
        rows.append(row)
    return rows


def read_held_out(run: str | Path) -> dict[int, dict[str, list]]:
    """A run's held_out.jsonl: iteration -> its evaluation's columns (task, won, steps); the last row of an
    iteration wins (a resumed run's). Empty if the run wrote none."""
    path = Path(run) / "held_out.jsonl"
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # the cut last line of a killed run (a row is written whole, in one call)
        out[row.pop("iteration")] = row
    return out


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tensor_bytes(*trees) -> int:
    """The bytes of the tensors in these nested dicts and lists, each storage counted once (tied weights) at
    its largest view: a lower bound on what saving them writes (safetensors, torch.save)."""
    sizes: dict[int, int] = {}
    stack = list(trees)
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            key = item.untyped_storage().data_ptr()
            sizes[key] = max(sizes.get(key, 0), item.numel() * item.element_size())
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return sum(sizes.values())


def _free_bytes(path: Path) -> int:
    """The bytes this process may still write on `path`'s filesystem (root may use the reserved blocks too)."""
    try:
        st = os.statvfs(path)
    except OSError:  # unknown: assume room, the write itself will tell
        return sys.maxsize
    return st.f_frsize * (st.f_bfree if os.geteuid() == 0 else st.f_bavail)


def _write_fault(error: BaseException, tmp: Path, need: int) -> str | None:
    """The filesystem's reason why writing a checkpoint into `tmp` failed, or None (not a filesystem fault).
    safetensors and torch.save report a full disk in their own exceptions, torch.save without the errno: a
    disk with less room than the rest of the checkpoint (at least 1 MiB) counts as full. That is sound, since
    the save only started with room for all `need` bytes."""
    if not isinstance(error, Exception):
        return None
    if reason := write_fault(error):
        return reason
    try:
        written = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file()) if tmp.is_dir() else 0
    except OSError:
        written = 0
    return os.strerror(errno.ENOSPC) if _free_bytes(tmp.parent) < max(need - written, 2**20) else None


class RunDir:
    """The run's files. With `write=False` (every torchrun rank but 0) it only knows its path."""

    def __init__(self, path: str | Path, config: dict, purge_step: int | None = None, write: bool = True) -> None:
        """`config`: the resolved options (algos.config.flat; its report_to picks TensorBoard and W&B),
        written to config.yaml by a new run only (a resume records its changes: algos/lineage.py);
        `purge_step`: resuming at this iteration, TensorBoard drops the dead run's later events and W&B
        continues the directory's W&B run."""
        self.path, self.write = Path(path), write
        self.tb, self.wandb = None, None
        if not write:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        resolved = dict(config)
        if purge_step is None:  # config.yaml is the run's birth certificate: written once, never rewritten
            with open(self.path / "config.yaml", "w") as f:
                yaml.safe_dump(resolved, f, sort_keys=False)
        reporters = report_to(resolved.get("report_to", "tensorboard"))
        if "tensorboard" in reporters:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=str(self.path), purge_step=purge_step)
            table = "\n".join(f"|{k}|{v}|" for k, v in resolved.items())
            self.tb.add_text("hyperparameters", f"|option|value|\n|-|-|\n{table}")
        if "wandb" in reporters:
            self.wandb = WandbReporter(self.path, resolved, resume=purge_step is not None)
        self._metrics = open(self.path / "metrics.jsonl", "a")  # noqa: SIM115 (closed in close())
        self._transcripts = open(self.path / "transcripts.jsonl", "a")  # noqa: SIM115

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        if not self.write:
            return
        clean = {k: float(v) for k, v in metrics.items()}
        if self.tb is not None:
            for k, v in clean.items():
                if math.isfinite(v):
                    self.tb.add_scalar(k, v, iteration)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(iteration, clean)
        # JSON has no NaN/inf: such values are written as null
        record = {"iteration": iteration, **{k: v if math.isfinite(v) else None for k, v in clean.items()}}
        self._metrics.write(json.dumps(record) + "\n")
        self._metrics.flush()

    def log_held_out(self, iteration: int, record: dict[str, list]) -> None:
        """One evaluation's episodes (HeldOut.record); a resumed run that evaluates an iteration again adds
        a row, and readers take the last row per iteration (`read_held_out`)."""
        if not self.write:
            return
        with open(self.path / "held_out.jsonl", "a") as f:
            f.write(json.dumps({"iteration": iteration, **record}) + "\n")

    def log_histogram(self, iteration: int, tag: str, values) -> None:
        """TensorBoard only (metrics.jsonl holds scalars)."""
        if self.tb is not None and len(values):
            self.tb.add_histogram(tag, np.asarray(values), iteration)

    def log_transcript(self, iteration: int, record: dict, markdown: str) -> None:
        if not self.write:
            return
        self._transcripts.write(json.dumps({"iteration": iteration, **record}) + "\n")
        self._transcripts.flush()
        if self.tb is not None:
            self.tb.add_text("transcripts", markdown, iteration)
        if self.wandb is not None:  # a table row per step, sent with the iteration's metrics
            self.wandb.add_transcript(iteration, record)

    def save_checkpoint(self, iteration: int, model, tokenizer, trainer_state: dict,
                        weights: dict | None = None, merged: dict | None = None) -> Path:  # fmt: skip
        """Write into a temp folder, fsync, then rename: a crash never leaves half a checkpoint.
        `weights`: the full state dict when the model is sharded (gathered by the caller); a LoRA
        model saves its adapter, and `merged` weights, if given, go to merged/ as a full model.
        A filesystem fault is a StorageError (one line): less free space than the tensors to write is refused
        before anything is written; a write that fails (a full disk, a folder that turned read-only) removes
        the temp folder. Either way the earlier checkpoints stay as they were."""
        final = self.path / "checkpoints" / f"iter_{iteration}"
        if not self.write:
            return final
        model = getattr(model, "module", model)  # DDP
        own = None if weights is not None or hasattr(model, "peft_config") else model.state_dict()  # an adapter: small
        need = _tensor_bytes(weights, own, merged, trainer_state)
        if (free := _free_bytes(self.path)) < need:
            raise StorageError(self._unsaved(final, f"{os.strerror(errno.ENOSPC)}: {free / 2**20:.0f} MiB free, it "
                                                   f"needs at least {need / 2**20:.0f} MiB"))  # fmt: skip
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{time.time_ns()}")
        try:
            tmp.mkdir(parents=True)
            model.save_pretrained(tmp, safe_serialization=True, state_dict=weights, is_main_process=True)
            tokenizer.save_pretrained(tmp)
            if merged is not None:
                base = model.get_base_model() if hasattr(model, "get_base_model") else model
                base.save_pretrained(tmp / "merged", safe_serialization=True, state_dict=merged, is_main_process=True)
                tokenizer.save_pretrained(tmp / "merged")
            torch.save(trainer_state, tmp / TRAINER_STATE)
            for f in sorted(tmp.rglob("*"), reverse=True):  # on disk before the rename makes the checkpoint visible
                _fsync(f)
            _fsync(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException as e:
            reason = _write_fault(e, tmp, need)  # before the temp folder goes: the room its files took
            shutil.rmtree(tmp, ignore_errors=True)
            if reason is None:
                raise
            raise StorageError(self._unsaved(final, reason)) from None
        _fsync(final.parent)
        return final

    def _unsaved(self, final: Path, reason: str) -> str:
        """The one line of a checkpoint that could not be saved: where, why, and what to do."""
        earlier = any(final.parent.glob("iter_*")) if final.parent.is_dir() else False
        then = f"--resume {self.path} continues from the newest one" if earlier else "run it again"
        return (f"--output-dir {self.path}: cannot save checkpoints/{final.name} ({reason}); nothing of it is left "
                f"and the earlier checkpoints are untouched; once it can be written, {then}")  # fmt: skip

    def write_json(self, name: str, record: dict) -> None:
        if self.write:
            (self.path / name).write_text(json.dumps(record, indent=1) + "\n")

    def close(self) -> None:
        if not self.write:
            return
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.close()
        self._metrics.close()
        self._transcripts.close()
