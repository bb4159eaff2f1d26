"""A run's identity across resumes and forks: which settings define what a run learns, and the records
that keep a run directory's history honest.

    python -m algos.train --resume runs/A --iterations 48           # extends run A: allowed, recorded
    python -m algos.train --resume runs/A --env Sokoban-v0          # refused: that is another run
    python -m algos.train --resume runs/A --fork runs/B --lr 5e-5   # a new run B, from A's newest checkpoint

A run directory's `config.yaml` is written once, when the run starts, and never again. A resume may
change only the settings that extend or tune the run without changing what it learns (`CHANGEABLE`:
its length, evaluation and logging, its safety stops, and where and how fast the same numbers are
computed); each resume that changes any appends one row to `resumes.jsonl`, and the run's current
config is config.yaml with those rows applied in order (`saved_config`). Every other setting is the
run's identity: a resume that changes one is refused in one line naming them. `--fork NEW_DIR`
continues the run as a new one instead: NEW_DIR gets its own config.yaml and `parent.json`, which
names the parent, the checkpoint and iteration it started from, and what it changed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from algos.config import Config, ConfigError, env_kwargs, flat

RESUMES = "resumes.jsonl"  # one row per resume that changed a setting
PARENT = "parent.json"  # a fork's origin

EXTENDS = ("iterations", "max_env_steps")  # how long the run goes on
MEASURES = ("eval_episodes", "eval_every", "save_every", "keep_checkpoints", "transcripts", "transcript_every",
            "report_to", "wandb_project", "wandb_entity", "wandb_name", "audit_every", "audit_honeypots",
            "probe_threshold")  # fmt: skip  # what is evaluated, logged and kept
STOPS = ("max_bad_updates", "max_failed_reward_iterations")  # when a failing run gives up
RUNS_ON = ("device", "trust_remote_code", "generation_batch_size", "micro_batch_size", "micro_batch_tokens",
           "min_update_samples", "gradient_checkpointing", "share_prompts", "lora_save_merged", "env_workers",
           "env_isolation", "env_backend", "env_step_timeout", "ray_address", "vllm_gpu_memory_utilization",
           "vllm_kv_cache_gib", "vllm_enforce_eager", "vllm_sleep", "sync_check_every", "sync_probe_size",
           "sync_tolerance")  # fmt: skip  # where and in what slices the same numbers are computed
CHANGEABLE = frozenset(EXTENDS + MEASURES + STOPS + RUNS_ON)
BOOKKEEPING = frozenset({"output_dir", "overwrite"})  # set by --resume itself
# what an episode is (the task, the model and how it is prompted): a fork that changes one of these plays
# other episodes than its parent, so it takes its own held-out baseline and drops samples held for later
ROLLOUT_KEYS = frozenset({"env", "env_kwargs", "model", "dtype", "context", "memory", "max_context_tokens",
                          "prompt_template", "action_format", "temperature", "top_p", "max_new_tokens",
                          "max_prompt_tokens"})  # fmt: skip

FORK_FIXED = frozenset({"model", "lora_rank", "lora_target_modules"})  # what a fork's weights and optimizer are


@dataclass(frozen=True)
class Resume:
    """`--resume RUN_DIR [--fork NEW_DIR]`: the run continued (`source`), its current options (config.yaml
    with every resume's changes, algos/lineage.py), and the new run directory of a fork (else None)."""

    source: Path
    saved: dict
    fork: Path | None = None

    @property
    def output_dir(self) -> Path:
        return self.fork or self.source


def identity_keys() -> list[str]:
    """The settings that define what a run learns: every option but the changeable ones (a new option
    belongs to the identity until it is listed as changeable)."""
    return [k for k in flat(Config()) if k not in CHANGEABLE | BOOKKEEPING]


def saved_config(run_dir: Path) -> dict:
    """The run's current options: its config.yaml, then each resume's changes in order. Raises ConfigError."""
    run_dir = Path(run_dir)
    try:
        values = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"--resume {run_dir}: cannot read its config.yaml ({str(e).splitlines()[0]})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--resume {run_dir}: its config.yaml holds no mapping of option: value")
    for row in resume_records(run_dir):
        values.update({key: change[1] for key, change in row.get("changed", {}).items()})
    return values


def resume_records(run_dir: Path) -> list[dict]:
    """The rows of a run's resumes.jsonl (none when no resume changed anything); a line cut by a kill is skipped."""
    path = Path(run_dir) / RESUMES
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("changed"), dict):
            rows.append(row)
    return rows


def changes(saved: dict, cfg: Config) -> dict[str, tuple]:
    """{option: (saved value, new value)} for every option whose value differs (env kwargs compared as the
    values they parse to, so `level: 5` and `--env-kwargs level 5` agree; an option the saved config lacks,
    newer than the run, counts as its default)."""
    new, defaults = flat(cfg), flat(Config())
    out = {}
    for key, value in new.items():
        if key in BOOKKEEPING:
            continue
        old = saved.get(key, defaults[key])  # an option newer than the run: the default it ran with
        if key == "env_kwargs":
            same = env_kwargs(Config(env_kwargs={str(k): str(v) for k, v in (old or {}).items()})) == env_kwargs(cfg)
        else:
            same = old == value or (isinstance(old, (int, float)) and isinstance(value, (int, float)) and
                                    not isinstance(old, bool) and float(old) == float(value))  # fmt: skip
        if not same:
            out[key] = (old, value)
    return out


def rollouts_changed(changed: dict[str, tuple]) -> bool:
    """Whether a fork's changes make its episodes other than its parent's (ROLLOUT_KEYS)."""
    return bool(ROLLOUT_KEYS & changed.keys())


def check_resume(run_dir: Path, changed: dict[str, tuple]) -> None:
    """Refuse, in one line, a resume that changes the run's identity. Raises ConfigError."""
    identity = {k: v for k, v in changed.items() if k not in CHANGEABLE}
    if not identity:
        return
    raise ConfigError(f"--resume {run_dir}: {describe(identity)} would change what the run learns (its identity, docs/design.md); "
                      f"continue it as a new run with --fork NEW_DIR, or leave {'that flag' if len(identity) == 1 else 'those flags'} out")  # fmt: skip


def check_fork(changed: dict[str, tuple]) -> None:
    """Refuse, in one line, a fork that changes what it starts from: the model it loads is the parent's
    checkpoint, and the optimizer moments it keeps are for the parent's trainable weights. Raises ConfigError."""
    fixed = {k: v for k, v in changed.items() if k in FORK_FIXED}
    if fixed:
        raise ConfigError(f"--fork: {describe(fixed)} cannot change in a fork (it continues the parent's weights and "
                          "optimizer); start a new run from the checkpoint with --model DIR/checkpoints/iter_N")  # fmt: skip


def record_resume(run_dir: Path, iteration: int, changed: dict[str, tuple]) -> None:
    """Append a resume's changes to resumes.jsonl (nothing when it changed nothing)."""
    if not changed:
        return
    row = {"resumed": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "from_iteration": iteration,
           "changed": {k: list(v) for k, v in changed.items()}}  # fmt: skip
    with open(Path(run_dir) / RESUMES, "a") as f:
        f.write(json.dumps(row) + "\n")


def record_fork(new_dir: Path, parent: Path, checkpoint: Path, iteration: int, changed: dict[str, tuple]) -> None:
    """A fork's parent.json: where it came from and what it changed."""
    record = {"parent": str(Path(parent).resolve()), "checkpoint": str(Path(checkpoint).resolve()),
              "iteration": iteration, "changed": {k: list(v) for k, v in changed.items()}}  # fmt: skip
    (Path(new_dir) / PARENT).write_text(json.dumps(record, indent=1) + "\n")


def describe(changed: dict[str, tuple]) -> str:
    """`iterations 24 -> 32, eval_every 8 -> 4`: a change set in one line."""
    return ", ".join(f"{k} {_show(old)} -> {_show(new)}" for k, (old, new) in changed.items())


def _show(value: object) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)
