"""Train an LLM agent on a multi-step text env with GRPO or GiGPO.

    python -m algos.train                                   # the default job (CPU, minutes)
    python -m algos.train --env KeyDoor-Hard-v0 --algo grpo --iterations 50 --seed 1
    python -m algos.train --config configs/qwen2.5-1.5b.yaml --model Qwen/Qwen2.5-1.5B-Instruct
    python -m algos.train --list-envs                       # the registered envs (python -m envs)

One iteration: collect num_groups x group_size episodes (the envs of a group share a
seed), compute advantages (GRPO: episode-level; GiGPO: episode + step-level anchor
states), turn every env step into a sample, run a PPO-clip update, log. Before RL, an
optional SFT warm-up on the env's expert actions gives the model partial competence, so
that groups have different outcomes and RL has a signal. `train()` below is that loop, one
call per phase; the parts it calls live in algos/run.py (`Run`, `LoopState`).

Generation runs through the HF backend (the reference) or, with `--backend vllm`, an
in-process vLLM engine that gets the new weights after every update and is checked against
the trainer on a probe batch (algos/weight_sync.py).

`--resume RUN_DIR` continues a run from its newest intact checkpoint, exactly (algos/
checkpoint.py). A run directory belongs to one run: it is locked while a run writes to it, and a
fresh run refuses one that already holds a run unless `--overwrite` (algos/run_lock.py). Every
env call is guarded (a failure or a hang ends that episode, counted in rollout/env_errors;
`--env-workers N` steps them in parallel worker processes, restarted when they crash or hang,
`--env-backend ray` as Ray actors; envs/workers.py), and updates with a non-finite loss or
gradient are skipped, weights untouched (`--max-bad-updates` in a row stop the run).

`torchrun --nproc_per_node N -m algos.train ...` runs the same loop on N ranks: each collects
its share of the groups, the trajectories are gathered, each trains on its own groups with
FSDP2 (or `--parallel ddp`), rank 0 logs and checkpoints (algos/distributed.py). `--lora-rank`
trains a LoRA adapter; `--gradient-checkpointing` and bf16 autocast save memory
(docs/scaling.md).
"""

from __future__ import annotations

import sys
import time

from agents.model import unbuilt
from algos import distributed, lineage, presets
from algos.checkpoint import Finished, check_model
from algos.cli import parse_config, resume_argv
from algos.config import Config, ConfigError
from algos.run import NumericError, RewardError, Run
from algos.run_dir import RunDir
from algos.run_lock import check_output_dir
from algos.validate import inert_notes, toy_defaults_note, validate
from algos.weight_sync import SyncError
from envs.base import StorageError, check_cache


def train(cfg: Config, resume: lineage.Resume | None = None) -> RunDir:
    """One run; `resume`: a run to continue from its newest intact checkpoint (in its own directory, or,
    forked, in cfg.output_dir)."""
    with Run(cfg, resume) as run:  # every part of a run, built (algos/run.py); its directory stays locked until the end
        if problem := run.warm_up():  # a fresh run: SFT on expert actions, the held-out baseline, iter_0
            raise SyncError(f"{problem} The trainer's weights are saved in {run.save(0)}")
        for it in run.iterations():
            started = time.perf_counter()
            batch = run.rollout()  # num_groups x group_size episodes, rewards composed, dynamic sampling
            adv, adv_stats = run.advantages(batch)  # GRPO / GiGPO / RLOO, one per step row
            update = run.update(batch, adv)  # PPO-clip, or the samples held for later
            run.loop.advance(it, batch, update)  # the one place the loop's state moves
            if update.applied and (problem := run.sync(it, batch)):  # the engine gets the new weights
                raise SyncError(f"{problem} The trainer's weights are saved in {run.save(it)}")
            run.log(it, batch, adv, {**adv_stats, **update.stats}, started)
            if stop := run.stop_reason():
                if stop.error:  # the run cannot go on: the weights are saved, then one line and exit 1
                    raise stop.error(stop.message(run.save(it)))
                break  # --max-env-steps spent
            if run.due(run.cfg.log.eval_every, it) and run.cfg.log.eval_episodes:
                run.loop.evaluated(run.evaluate(it))
            if run.due(run.cfg.log.save_every, it):
                run.save(it)
        return run.finish()  # the final evaluation and checkpoint


def main(argv: list[str] | None = None) -> int:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list-envs" in argv:  # the env catalog (python -m envs), with any --env package imported
        from envs.catalog import main as list_envs

        env = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--env"), "")
        return list_envs(["--import", env.split(":")[0]] if ":" in env else [])
    try:
        argv, resume = resume_argv(argv)  # the run's own options, then any flags given (e.g. more --iterations)
        saved = (f"{resume.source}/config.yaml", resume.saved) if resume else None
        cfg = parse_config(argv, saved)
        if resume:  # a resume keeps the run's identity; a fork keeps its weights (algos/lineage.py)
            changed = lineage.changes(resume.saved, cfg)
            if resume.fork:
                lineage.check_fork(changed)
            else:
                lineage.check_resume(resume.source, changed)
        check_output_dir(cfg.output_dir, resume is not None and not resume.fork, cfg.overwrite)  # a file, in use, or holding a run
        if unbuilt(cfg.model):  # it is built into TEXTRL_CACHE (TextWorld games: checked as validate makes the env)
            check_cache()
        validate(cfg)  # before anything heavy loads
        if resume is None:
            check_model(cfg.model)  # a --model folder's files are intact (cheap: no weights read)
            notes = [f"{flag} brings configs/{path.name} (a flag or --config still wins)"
                     for flag, path in presets.named(cfg.model, cfg.env)] + inert_notes(cfg)  # fmt: skip
            if note := toy_defaults_note(cfg):
                notes.append(note)
            for note in notes if distributed.from_env().main else []:
                print(f"note: {note}", file=sys.stderr)
        train(cfg, resume)  # may still find a mistake once the env is loaded (e.g. no expert)
    except (ConfigError, StorageError) as e:  # StorageError: the cache, the run directory or a checkpoint
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Finished as e:  # --resume of a run that already ran all its iterations: nothing is touched
        print(e, file=sys.stderr)
        return 0
    except (SyncError, NumericError, RewardError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:  # after train() returned: a DDP module still alive would hang on a destroyed group
        distributed.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
