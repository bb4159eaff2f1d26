"""Where a run's numbers go besides metrics.jsonl (--report-to): TensorBoard, Weights & Biases.

    python -m algos.train --report-to tensorboard,wandb --wandb-project textrl
    WANDB_MODE=offline python -m algos.train --report-to wandb   # no account; `wandb sync` later

metrics.jsonl is always written; `tensorboard` (the default) adds the event files of the run directory
(algos/run_dir.py), `wandb` a W&B run that gets what RunDir logs: the scalars (the same tags, with the
iteration as their x-axis), the flat config, each logged iteration's transcripts as a wandb.Table (one
row per step), and the evaluation PNGs of scripts/evaluate.py for a checkpoint of the run. The W&B
run's id is kept in DIR/wandb_run.json, so `--resume DIR` continues the same W&B run. Histograms stay
TensorBoard's. Only rank 0 reports: RunDir builds reporters only where it writes.

This module imports no torch and imports wandb only when a W&B run starts (algos/config.py uses
`check_report_to` at validate time).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from pathlib import Path

REPORTERS = ("tensorboard", "wandb", "none")
WANDB_RUN = "wandb_run.json"  # the W&B run's id, project and entity: what --resume continues
EPISODE_COLUMNS = ("iteration", "group", "seed", "task", "won")  # a transcript's per-episode fields


def report_to(text: str) -> tuple[str, ...]:
    """--report-to's comma-separated names, checked (`none`: metrics.jsonl only). Raises ValueError."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in REPORTERS]
    if unknown or not names:
        raise ValueError(f"--report-to {text!r}: unknown reporter {', '.join(unknown) or '(none given)'}; "
                         f"use a comma-separated list of {', '.join(REPORTERS[:-1])}, or none")  # fmt: skip
    if "none" in names and len(names) > 1:
        raise ValueError(f"--report-to {text!r}: none cannot be combined with other reporters")
    return names


def check_report_to(text: str) -> None:
    """The names, and that the packages they need are installed (found, not imported). Raises ValueError."""
    if "wandb" in report_to(text) and importlib.util.find_spec("wandb") is None:
        raise ValueError("--report-to wandb needs the wandb package: pip install 'textrl[wandb]'")


class WandbReporter:
    """One W&B run for one run directory; resuming, the run whose id DIR/wandb_run.json holds."""

    def __init__(self, run_dir: Path, config: dict, resume: bool) -> None:
        """`config`: the flat options (their project, entity and name pick the W&B run); `resume`: continue
        the directory's W&B run when it has one (a fresh run, also after --overwrite, starts a new one)."""
        import wandb

        self.wandb, self.path = wandb, run_dir / WANDB_RUN
        saved = json.loads(self.path.read_text()) if resume and self.path.exists() else {}
        self.run = wandb.init(
            project=saved.get("project") or config.get("wandb_project") or "textrl",
            entity=saved.get("entity") or config.get("wandb_entity") or None,
            name=config.get("wandb_name") or run_dir.resolve().name,
            id=saved.get("id"),
            resume="allow" if saved else None,
            config=config,
            dir=os.environ.get("WANDB_DIR") or str(run_dir),  # offline runs stay beside the run's other files
            allow_val_change=True,  # a resumed run may change options (e.g. more --iterations)
        )
        # the iteration is every chart's x-axis: rows logged after a resume keep their place even where W&B's
        # own step counter went further before the crash
        self.run.define_metric("iteration")
        self.run.define_metric("*", step_metric="iteration")
        self.path.write_text(json.dumps({"id": self.run.id, "project": self.run.project,
                                         "entity": self.run.entity}) + "\n")  # fmt: skip
        self._rows: list[dict] = []  # transcript steps waiting for their iteration's metrics row

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        """The finite scalars (as TensorBoard gets them), and the transcripts logged since the last call."""
        row: dict = {k: v for k, v in metrics.items() if math.isfinite(v)}
        if self._rows:
            row["transcripts"] = self._table()
        self.run.log({"iteration": iteration, **row})

    def add_transcript(self, iteration: int, record: dict) -> None:
        """One episode (algos.rollout_stats.transcript), a table row per step; sent with the next `log`."""
        episode = {"iteration": iteration, **{k: record.get(k) for k in EPISODE_COLUMNS[1:]}}
        self._rows += [{**episode, **step} for step in record.get("steps", [])]

    def _table(self):
        columns = list(EPISODE_COLUMNS) + [k for k in dict.fromkeys(k for r in self._rows for k in r)
                                           if k not in EPISODE_COLUMNS]  # fmt: skip
        table = self.wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in self._rows])
        self._rows = []
        return table

    def close(self) -> None:
        if self._rows:
            self.run.log({"transcripts": self._table()})
        self.run.finish()


def log_images(run_dir: Path, images: list[Path], iteration: int | None = None) -> bool:
    """Attach PNGs (scripts/evaluate.py's plots of one of the run's checkpoints) to the run directory's W&B
    run, at `iteration`; False (nothing sent) when the run has no W&B run or wandb is not installed."""
    path = Path(run_dir) / WANDB_RUN
    if not path.exists() or importlib.util.find_spec("wandb") is None:
        return False
    import wandb

    saved = json.loads(path.read_text())
    run = wandb.init(project=saved.get("project"), entity=saved.get("entity"), id=saved["id"], resume="allow",
                     dir=os.environ.get("WANDB_DIR") or str(run_dir))  # fmt: skip
    run.define_metric("iteration")
    run.define_metric("eval/*", step_metric="iteration")
    step = {} if iteration is None else {"iteration": iteration}
    run.log({**step, **{f"eval/{Path(p).stem}": wandb.Image(str(p)) for p in images}})
    run.finish()
    return True
