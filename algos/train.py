"""Train an LLM agent on a multi-step text env with GRPO or GiGPO.

    python -m algos.train                                   # the default job (CPU, minutes)
    python -m algos.train --env KeyDoor-Hard-v0 --algo grpo --iterations 50 --seed 1
    python -m algos.train --config configs/qwen2.5-1.5b.yaml --model Qwen/Qwen2.5-1.5B-Instruct
    python -m algos.train --list-envs                       # the registered envs (python -m envs)

One iteration: collect num_groups x group_size episodes (the envs of a group share a
seed), compute advantages (GRPO: episode-level; GiGPO: episode + step-level anchor
states), turn every env step into a sample, run a PPO-clip update, log. Before RL, an
optional SFT warm-up on the env's expert actions gives the model partial competence, so
that groups have different outcomes and RL has a signal.

Generation runs through the HF backend (the reference) or, with `--backend vllm`, an
in-process vLLM engine that gets the new weights after every update and is checked against
the trainer on a probe batch (algos/weight_sync.py).

`--resume RUN_DIR` continues a run from its newest complete checkpoint, exactly (algos/
checkpoint.py). Every env call is guarded (a failure or a hang ends that episode, counted in
rollout/env_errors; `--env-isolation` runs each env in its own process), and updates with a
non-finite loss or gradient are skipped, weights untouched (`--max-bad-updates` in a row stop
the run).

`torchrun --nproc_per_node N -m algos.train ...` runs the same loop on N ranks: each collects
its share of the groups, the trajectories are gathered, each trains on its own groups with
FSDP2 (or `--parallel ddp`), rank 0 logs and checkpoints (algos/distributed.py). `--lora-rank`
trains a LoRA adapter; `--gradient-checkpointing` and bf16 autocast save memory
(docs/scaling.md).
"""

from __future__ import annotations

import copy
import os
import random
import sys
import time
from dataclasses import fields, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from agents.agent import LLMAgent
from agents.backend import HFBackend, Sampling
from agents.model import (
    adapter_base,
    add_lora,
    enable_gradient_checkpointing,
    is_adapter,
    load_model,
    load_tokenizer,
    resolve_model,
    stop_ids,
)
from agents.prompt import PromptBuilder
from agents.templates import template_notes
from algos import checkpoint, distributed
from algos.advantages import (
    anchor_group_sizes,
    gigpo_advantages,
    grpo_advantages,
    rloo_advantages,
    similarity_keys,
)
from algos.collector import Collector, Step, note_once
from algos.config import Config, ConfigError, env_kwargs, parse_config, rollout_is_level, validate
from algos.data import DataLayer, data_config, task_sampler
from algos.evaluation import held_out_seeds, play, summarize
from algos.learner import Learner, LearnerConfig, Sample
from algos.rollout_stats import rollout_metrics, transcript, transcript_markdown
from algos.run_dir import TRAINER_STATE, RunDir
from algos.scoring import audit_hook, rescore, reward_layer
from algos.sft import has_expert, warm_up_from_config
from algos.weight_sync import SyncError, probe_prompts, sync_backend
from envs import prompt_template

DEFAULT_SFT_STEPS = 90
NEGLIGIBLE = 1e-6  # |advantage| below this is float noise around zero: the sample teaches nothing
# time/<section>_s of every iteration; env, prompt, generate and parse are parts of rollout
TIME_SECTIONS = ("rollout", "env", "prompt", "generate", "parse", "advantage", "train", "sync", "log")


def compute_advantages(cfg: Config, steps: list[Step]) -> tuple[np.ndarray, dict]:
    """One advantage per step row (rows of a trajectory in time order)."""
    penalty = np.array([cfg.invalid_penalty * (not s.action_valid) for s in steps])
    rewards = np.array([s.reward for s in steps])
    placed = dict(penalties=penalty) if cfg.penalty_placement == "step" and cfg.invalid_penalty else {}
    if not placed:  # inside the returns: the step's reward, before returns and advantages
        rewards = rewards - penalty
    traj_ids = np.array([s.traj_id for s in steps])
    group_ids = np.array([s.group_id for s in steps])
    if cfg.anchor == "similarity":
        keys = list(similarity_keys(group_ids, [s.observation for s in steps], cfg.similarity_threshold))
    else:
        keys = [s.state_key for s in steps]
    common = dict(norm=cfg.norm, episode_baseline=cfg.episode_baseline, scale=cfg.scale, **placed)
    if cfg.algo == "gigpo":
        adv = gigpo_advantages(rewards, traj_ids, group_ids, keys, gamma=cfg.gamma, omega=cfg.omega, **common)
    elif cfg.algo == "rloo":
        adv = rloo_advantages(rewards, traj_ids, group_ids)
    else:
        adv = grpo_advantages(rewards, traj_ids, group_ids, **common)
    sizes = anchor_group_sizes(group_ids, keys)
    stats = {
        "gigpo/anchor_group_size_mean": float(sizes.mean()),
        "gigpo/singleton_frac": float((sizes == 1).mean()),
        "adv/mean": float(adv.mean()),
        "adv/std": float(adv.std()),
        "adv/abs_max": float(np.abs(adv).max()),
    }
    return adv, stats


def informative(cfg: Config, group: list) -> bool:
    """Whether a group gives any of its steps a nonzero advantage (episode or step term, penalties
    included): what dynamic sampling keeps. Computed alone, as the group's statistics are its own."""
    steps = [s for t in group for s in t.steps]
    return bool(steps) and bool(np.abs(compute_advantages(cfg, steps)[0]).max() > NEGLIGIBLE)


def held_rows(samples: list[Sample], world) -> list:
    """Held samples as plain lists, every rank's (a checkpoint's loop state), gathered to all ranks."""
    return distributed.gather([[s.prompt_ids, s.response_ids, s.advantage, s.old_logprobs, s.is_weights]
                               for s in samples], world)  # fmt: skip


def held_samples(loop: dict, world) -> list[Sample]:
    """This rank's held samples from a checkpoint's loop state."""
    ranks = loop.get("held", [])
    return [Sample(*row) for row in ranks[world.rank]] if len(ranks) == world.size else []


def evaluate(agent: LLMAgent, cfg: Config, episodes: int, world=distributed.SINGLE) -> dict[str, float]:
    """Held-out episodes, one per task, sampled at the training temperature (algos/evaluation.py);
    under torchrun each rank plays its share of the tasks."""
    seeds = held_out_seeds(episodes)[world.rank :: world.size]
    trajs = play(agent, cfg.env, env_kwargs(cfg), seeds, max_envs=episodes, leave=False,
                 step_timeout=cfg.env_step_timeout, isolate=cfg.env_isolation) if seeds else []  # fmt: skip
    m = summarize([t for part in distributed.gather(trajs, world) for t in part])
    return {"eval/success_rate": m["success_rate"], "eval/episode_length": m["mean_steps"]}


def build(cfg: Config, world=distributed.SINGLE, device: str | None = None):
    """(policy, tokenizer, agent, learner options). The policy is the module the learner trains:
    LoRA-wrapped with --lora-rank, sharded or replicated under torchrun; the agent samples from it
    (or, when it is sharded and the backend is HF, from a full copy refreshed after each update)."""
    torch.manual_seed(cfg.seed)  # the same initial weights (and LoRA init) on every rank
    random.seed(cfg.seed)
    device = device or distributed.device_for(cfg.device, world)
    path = resolve_model(cfg.model)
    tokenizer = load_tokenizer(path, cfg.trust_remote_code)
    if world.main:
        for note in template_notes(tokenizer):  # what the checkpoint's chat template does to prompts
            note_once(note)
    model = load_model(path, device, getattr(torch, cfg.dtype), cfg.trust_remote_code,
                       adapter="train" if cfg.lora_rank else "merge")  # fmt: skip
    if cfg.lora_rank and not hasattr(model, "peft_config"):
        try:
            model = add_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules)
        except ValueError as e:  # peft: no such module in this model
            raise ConfigError(f"--lora-target-modules {cfg.lora_target_modules}: {str(e).splitlines()[0]}") from e
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    sampler_model = copy.deepcopy(model) if world.enabled and cfg.parallel == "fsdp" else model
    policy = distributed.wrap(model, cfg.parallel, world)
    eos = stop_ids(tokenizer, model)
    vocab = len(tokenizer)  # the head's rows beyond it (Qwen2.5: 271 of 151,936) are padding: never sampled
    if cfg.backend == "vllm":
        from agents.vllm_backend import VLLMBackend

        served = adapter_base(path) if is_adapter(path) else path  # an adapter's engine starts from its base
        backend = VLLMBackend(served, eos, engine_config(cfg), on_gpu=device.startswith("cuda"),
                              seed=cfg.seed + world.rank, vocab=vocab)  # fmt: skip
        if served != path:
            backend.sync(policy)
    else:
        backend = HFBackend(sampler_model, eos, tokenizer.pad_token_id, cfg.generation_batch_size,
                            cfg.seed + world.rank, cfg.autocast, vocab)  # fmt: skip
    sampling = Sampling(cfg.temperature, cfg.top_p, cfg.max_new_tokens)
    template = prompt_template(cfg.env) if cfg.prompt_template == "auto" else cfg.prompt_template
    prompts = PromptBuilder(cfg.memory, template=template)
    agent = LLMAgent(tokenizer, backend, prompts, sampling, cfg.max_prompt_tokens)
    # The learner's options carry the same names as the run's; greedy rollouts (T=0) score at T=1.
    shared = {f.name: getattr(cfg, f.name) for f in fields(LearnerConfig) if hasattr(cfg, f.name)}
    learner_cfg = LearnerConfig(
        **{**shared, "temperature": cfg.temperature or 1.0, "rollout_is": rollout_is_level(cfg), "vocab": vocab}
    )
    return policy, tokenizer, agent, learner_cfg


def engine_config(cfg: Config):
    from agents.vllm_backend import EngineConfig

    return EngineConfig(
        dtype=cfg.dtype,
        max_model_len=cfg.vllm_max_model_len or cfg.max_prompt_tokens + cfg.max_new_tokens,
        gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        kv_cache_gib=cfg.vllm_kv_cache_gib,
        enforce_eager=cfg.vllm_enforce_eager,
        tensor_parallel_size=cfg.vllm_tensor_parallel_size,
        sleep=cfg.vllm_sleep,
        trust_remote_code=cfg.trust_remote_code,
    )


def train(cfg: Config, resume: Path | None = None) -> RunDir:
    """One run; `resume`: a run directory to continue from its newest complete checkpoint."""
    world, device = distributed.init(cfg.device)  # one process unless launched by torchrun
    say = print if world.main else (lambda *a, **k: None)
    if not world.main:
        distributed.quiet_progress()  # one set of progress bars: rank 0's
    if not cfg.output_dir:
        cfg.output_dir = f"runs/{cfg.env.split(':')[-1]}-{cfg.algo}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    cfg.output_dir = distributed.broadcast(cfg.output_dir, world)  # rank 0's clock names the run
    if cfg.sft_steps is None:  # a checkpoint of this trainer is already warmed up; no expert, no warm-up
        warmed = os.path.exists(os.path.join(os.path.expanduser(cfg.model), TRAINER_STATE))
        cfg.sft_steps = 0 if warmed or not has_expert(cfg) else DEFAULT_SFT_STEPS
    if world.main:
        resolve_model(cfg.model)  # the tiny model is built once, by rank 0
    distributed.barrier(world)
    ckpt, state = checkpoint.resume_point(resume, world, cfg.parallel)
    start = state["iteration"] if state else 0
    model, tokenizer, agent, learner_cfg = build(replace(cfg, model=str(ckpt)) if ckpt else cfg, world, device)
    run = RunDir(cfg.output_dir, cfg, purge_step=start + 1 if ckpt else None, write=world.main)
    say(f"run directory: {run.path}  (tensorboard --logdir {run.path})", file=sys.stderr)
    if world.enabled:
        say(f"{world.size} ranks ({cfg.parallel}), {cfg.num_groups} groups per iteration in all", file=sys.stderr)

    def save(it: int, learner=None, loop=None) -> Path:
        return checkpoint.save(run, it, model, tokenizer, learner, cfg, data.sampler if learner else None, agent,
                               loop, world)  # fmt: skip

    # ---- warm-up: SFT on expert demonstrations -------------------------------------
    held_out = None  # the latest held-out success rate, shown on the progress bar
    if ckpt:
        held_out = state.get("loop", {}).get("held_out")
        say(f"resuming after iteration {start} from {ckpt}", file=sys.stderr)
    elif cfg.sft_steps > 0:
        demos, losses = warm_up_from_config(cfg, agent, model, learner_cfg, world)
        run.log(0, {"sft/loss": float(np.mean(losses[-10:])), "sft/demos": len(demos)})
        probe = probe_prompts([d.prompt_ids for d in demos], cfg.sync_probe_size)
        sync_backend(agent, model, cfg, run, 0, probe, check=cfg.sync_check_every > 0, world=world)
    if cfg.eval_episodes and not ckpt:
        warm = evaluate(agent, cfg, cfg.eval_episodes, world)
        run.log(0, warm)
        held_out = warm["eval/success_rate"]
        say(f"success after warm-up: {warm['eval/success_rate']:.1%}", file=sys.stderr)
    if cfg.sft_steps > 0 and not ckpt:  # the warmed-up model: a baseline, and a start that skips SFT
        save(0, loop={"held_out": held_out})

    # ---- RL -------------------------------------------------------------------------
    ref = None
    if cfg.beta > 0 and not cfg.lora_rank:  # the frozen reference is the policy RL started from
        warm_ckpt = run.path / "checkpoints" / "iter_0"
        source = warm_ckpt if ckpt and warm_ckpt.exists() else resolve_model(cfg.model)
        ref = load_model(str(source), device, getattr(torch, cfg.dtype), cfg.trust_remote_code)
        if not ckpt:
            ref.load_state_dict(distributed.full_state_dict(model))
        ref = distributed.wrap(ref.eval().requires_grad_(False), "fsdp", world) if cfg.parallel == "fsdp" else ref
    learner = Learner(model, learner_cfg, tokenizer.pad_token_id, ref_model=ref, seed=cfg.seed + world.rank,
                      world=world, adapter_reference=bool(cfg.lora_rank))  # fmt: skip
    collector = Collector(cfg.env, -(-cfg.num_groups // world.size), cfg.group_size, env_kwargs(cfg),
                          cfg.env_step_timeout, cfg.env_isolation)  # fmt: skip
    data = DataLayer(data_config(cfg), task_sampler(cfg, collector.envs[0], state), partial(informative, cfg))
    rewards = reward_layer(cfg, device)  # --reward: what a step earns
    audit = audit_hook(cfg, rewards, run.path / "reward_audit.json") if world.main else None
    loop = (state or {}).get("loop", {})
    env_steps, bad_updates = loop.get("env_steps", 0), loop.get("bad_updates", 0)
    held = held_samples(loop, world)  # short_batch=accumulate: samples waiting for enough company
    if state:  # put back everything that decides what happens next, RNGs last
        if "optimizer" in state:
            distributed.load_optimizer_state(model, learner.optimizer, state["optimizer"])
            learner.scheduler.load_state_dict(state["scheduler"])
        data.next_group_id, data.next_traj_id = loop.get("next_group_id", 0), loop.get("next_traj_id", 0)
        if audit:
            audit.history = checkpoint.audit_history(run.path, start)
        checkpoint.restore_rng(checkpoint.rank_rng(state, world), agent.backend,
                               learner if "optimizer" in state else None)  # fmt: skip

    mine: set[int] = set()  # the group ids this rank collected this iteration (all of them in one process)

    def collect(seeds: list[int], sizes: list[int], first_group_id: int, first_traj_id: int):
        def local(seeds, sizes, gid, tid):
            return rescore(rewards, collector.collect(agent, seeds, tid, sizes, gid))

        trajs, owned = distributed.collect_share(local, len(collector.envs), seeds, sizes, first_group_id,
                                                 first_traj_id, world)  # fmt: skip
        mine.update(owned)
        return trajs

    def loop_state() -> dict:
        return {"env_steps": env_steps, "bad_updates": bad_updates, "held_out": held_out,
                "next_group_id": data.next_group_id, "next_traj_id": data.next_traj_id,
                "held": held_rows(held, world)}  # fmt: skip

    last = cfg.iterations
    bar = tqdm(range(start + 1, cfg.iterations + 1), desc=f"{cfg.algo} {cfg.env}", initial=start,
               total=cfg.iterations, dynamic_ncols=True)  # fmt: skip
    clock = agent.stopwatch  # env, prompt, generate and parse seconds come from the rollouts
    last_logged = time.perf_counter()
    for it in bar:
        t0 = time.perf_counter()
        clock.lap()  # drop what evaluation and checkpoints put on it
        mine.clear()
        with clock.section("rollout"):
            trajs, collected, data_stats = data.next_batch(collect)

        steps = [s for t in trajs for s in t.steps]
        adv, adv_stats = np.zeros(0), {}
        train_stats = {"train/update_skipped": 1.0, "train/held_samples": float(len(held))}
        if steps:  # none when dynamic sampling found no informative group before its cap
            with clock.section("advantage"):  # every rank: all groups; each trains on its own
                adv, adv_stats = compute_advantages(cfg, steps)
            samples = held + [Sample(s.prompt_ids, s.response_ids, float(a), s.rollout_logprobs)
                              for s, a in zip(steps, adv) if s.group_id in mine]  # fmt: skip
            # a NaN advantage counts: the learner then skips its non-finite step (max_bad_updates)
            useful = distributed.all_sum([sum(not abs(x.advantage) <= NEGLIGIBLE for x in samples)], world)[0]
            need = cfg.group_size if cfg.min_update_samples is None else cfg.min_update_samples
            if useful < max(need, 1):  # too little to learn from: hold it or drop it
                held = samples if cfg.short_batch == "accumulate" else []
                train_stats = {"train/update_skipped": 1.0, "train/held_samples": float(len(held))}
            else:
                held = []
                agent.backend.release()  # GPU vLLM sleep mode: the update gets the KV cache's memory
                with clock.section("train"):
                    train_stats = {**learner.update(samples), "train/update_skipped": 0.0}
                train_stats["train/informative_samples"] = float(useful)
                bad_updates = bad_updates + 1 if train_stats.get("train/skipped_frac") == 1.0 else 0
                if cfg.max_bad_updates and bad_updates >= cfg.max_bad_updates:  # skipped steps left weights good
                    path = save(it, learner, loop_state())
                    raise NumericError(f"{bad_updates} updates in a row had a non-finite loss or gradient and "
                                       f"were skipped; the last good weights are saved in {path}")  # fmt: skip
                check = cfg.sync_check_every > 0 and it % cfg.sync_check_every == 0
                with clock.section("sync"):
                    sync_backend(agent, model, cfg, run, it, probe_prompts([s.prompt_ids for s in steps],
                                 cfg.sync_probe_size), check, world)  # fmt: skip

        env_steps += sum(len(t.steps) for t in collected)
        reward_stats = distributed.merge_metrics(distributed.gather(rewards.metrics(), world))  # over ranks
        metrics = {**rollout_metrics(collected), **reward_stats, **data_stats, **adv_stats, **train_stats}
        metrics["data/env_steps_total"] = float(env_steps)
        per_rank = distributed.gather(distributed.peak_memory_gib(device), world)
        metrics.update({f"memory/{k}": max(m[k] for m in per_rank) for k in per_rank[0]})  # the busiest rank
        with clock.section("log"):  # the final metrics line below is written after the clock stops
            run.log_histogram(it, "data/pass_rates", data.sampler.pass_rates())
            if cfg.transcript_every and it % cfg.transcript_every == 0:
                by_step = {(s.traj_id, s.t): float(a) for s, a in zip(steps, adv)}
                for traj in (trajs or collected)[: cfg.transcripts]:  # none kept: a dropped one, no advantages
                    record = transcript(traj, by_step, tokenizer.decode)
                    run.log_transcript(it, record, transcript_markdown(record))
        now = time.perf_counter()
        spent = clock.lap()
        metrics.update({f"time/{k}_s": spent.get(k, 0.0) for k in TIME_SECTIONS})
        metrics["time/iteration_s"] = now - t0
        metrics["time/wall_s"] = now - last_logged  # since the last iteration's log: evaluation, saves and all
        last_logged = now
        run.log(it, metrics)
        if audit and it % cfg.audit_every == 0:
            run.log(it, audit(it, collected))  # honeypots and probes mixed with this iteration's answers
        shown = {"success": f"{metrics['rollout/success_rate']:.2f}", "loss": f"{metrics.get('train/loss', 0):.3f}"}
        bar.set_postfix(**shown, **({"eval": f"{held_out:.2f}"} if held_out is not None else {}))
        if cfg.max_env_steps and env_steps >= cfg.max_env_steps:
            last = it  # the env-step budget is spent
            break
        if cfg.eval_episodes and cfg.eval_every and it % cfg.eval_every == 0 and it < cfg.iterations:
            result = evaluate(agent, cfg, cfg.eval_episodes, world)  # same held-out seeds every time
            run.log(it, result)
            held_out = result["eval/success_rate"]
        if cfg.save_every and it % cfg.save_every == 0 and it < cfg.iterations:
            save(it, learner, loop_state())
    collector.close()

    # ---- final evaluation and checkpoint --------------------------------------------
    if cfg.eval_episodes:
        final = evaluate(agent, cfg, cfg.eval_episodes, world)
        run.log(last, final)
        say(f"success after RL: {final['eval/success_rate']:.1%}", file=sys.stderr)
    path = save(last, learner, loop_state())
    say(f"checkpoint: {path}", file=sys.stderr)
    run.write_json("memory.json", {"ranks": distributed.gather(distributed.peak_memory_gib(device), world)})
    run.close()
    agent.backend.close()  # a vLLM engine leaves the process group before main() destroys it
    return run


class NumericError(RuntimeError):
    """Training cannot go on: every recent update had a non-finite loss or gradient."""


def main(argv: list[str] | None = None) -> int:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--list-envs" in argv:  # the env catalog (python -m envs), with any --env package imported
        from envs.catalog import main as list_envs

        env = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--env"), "")
        return list_envs(["--import", env.split(":")[0]] if ":" in env else [])
    try:
        resume = None
        if "--resume" in argv:  # the run's own resolved config, then any flags given (e.g. more --iterations)
            i = argv.index("--resume")
            if i + 1 >= len(argv) or not (Path(argv[i + 1]) / "config.yaml").is_file():
                raise ConfigError("--resume needs a run directory with a config.yaml (the --output-dir of a run)")
            resume = Path(argv[i + 1])
            argv = ["--config", str(resume / "config.yaml"), *argv[:i], *argv[i + 2 :], "--output-dir", str(resume)]
        cfg = parse_config(argv)
        validate(cfg)  # before anything heavy loads
        train(cfg, resume)  # may still find a mistake once the env is loaded (e.g. no expert)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (SyncError, NumericError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:  # after train() returned: a DDP module still alive would hang on a destroyed group
        distributed.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
