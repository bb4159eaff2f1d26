"""What every "unset" option means for this run, filled in once, before anything reads it.

A flag left unset (`--sft-steps`, `--min-update-samples`, `--output-dir`) or set to `auto`
(`--autocast`, `--rollout-is`, `--penalty-placement`) has a meaning that depends on the run: its
model, its device, its env, its algorithm, its clock. `resolve` works each out in one place and returns the config with the values
filled in; the learner, the sampler and the backends then take what it resolved, and config.yaml
records it (a resumed run reads the resolved values back and resolves nothing again).

    output_dir          runs/<env>-<algo>-s<seed>-<time> (rank 0's clock, broadcast)
    sft_steps           0 for a checkpoint of this trainer or an env without expert actions,
                        else DEFAULT_SFT_STEPS
    autocast            bf16 on a GPU that has it and on a CPU with bf16 units for a model of
                        >= BF16_MIN_PARAMETERS parameters (agents/model.py precision), else off
    rollout_is          token where rollouts and learner round differently (a vLLM engine, or
                        bf16 autocast), else off
    min_update_samples  group_size: one group's worth of informative samples
    micro_batch_tokens  CHAT_MICRO_BATCH_TOKENS in the chat context, else 0 (no cap)
    lora_alpha          2 x lora_rank (with LoRA)
    penalty_placement   step with episode_baseline=step under gigpo or grpo, else return
    max_context_tokens  (chat context) at most the model's max_position_embeddings, with a note
    vllm_max_model_len  max_prompt_tokens + max_new_tokens (chat context: max_context_tokens)
    sync_tolerance      by dtype (algos/weight_sync.py TOLERANCE: float32 1e-3, bf16 0.25, fp16 0.1)
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch

from agents.model import cpu_has_bf16, parameter_count, positions, precision, resolve_model
from algos import distributed
from algos.advantages import penalty_placement
from algos.config import DEFAULT_SFT_STEPS, Config
from algos.run_dir import TRAINER_STATE
from algos.run_lock import RUNS
from algos.sft import has_expert
from algos.weight_sync import tolerance_for
from envs.base import note_once

CHAT_MICRO_BATCH_TOKENS = 8192  # a micro-batch of episodes: about 8 of 1k tokens, or 2 of 4k


def resolve(cfg: Config, world: distributed.World, device: str) -> Config:
    """`cfg` with every unset or auto option resolved for this run on `device` (the model is built
    or downloaded first, where it has to be: its size decides --autocast auto)."""
    output_dir = cfg.output_dir or f"{RUNS}/{cfg.env.split(':')[-1]}-{cfg.algo}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"  # fmt: skip
    sft_steps = cfg.sft.sft_steps
    if sft_steps is None:
        warmed = (Path(cfg.model).expanduser() / TRAINER_STATE).exists()
        sft_steps = 0 if warmed or not has_expert(cfg) else DEFAULT_SFT_STEPS
    autocast = cfg.learner.autocast
    if autocast == "auto":
        autocast = precision("auto", device, parameter_count(resolve_model(cfg.model), cfg.trust_remote_code))
    elif autocast == "bf16" and torch.device(device).type == "cpu" and not cpu_has_bf16():
        # measured on an AVX2 CPU: a bf16 matmul at 1.3 GFLOP/s against 129 in float32; the default job's
        # warm-up step 9.3 s against 0.83 s (docs/benchmarks.md)
        note_once("--autocast bf16 on a CPU without bf16 matrix units (AMX or AVX512-BF16): bf16 runs about 10x "
                  "slower than float32 here; --autocast auto picks float32 on this CPU")  # fmt: skip
    rollout_is = cfg.learner.rollout_is
    if rollout_is == "auto":
        # a separate engine samples from its own copy of the policy, and in bf16 the HF backend's cached decode
        # rounds differently from the learner's full forward (SmolLM2: first-update token ratios up to 1.16);
        # float32 HF rollouts match the learner (1 + 2e-5)
        rollout_is = "token" if cfg.engine.backend == "vllm" or autocast == "bf16" else "off"
    min_update = cfg.data.group_size if cfg.learner.min_update_samples is None else cfg.learner.min_update_samples
    tokens = cfg.learner.micro_batch_tokens
    if tokens is None:
        tokens = CHAT_MICRO_BATCH_TOKENS if cfg.sampling.context == "chat" else 0
    learner = replace(cfg.learner, autocast=autocast, rollout_is=rollout_is, min_update_samples=min_update,
                      micro_batch_tokens=tokens)  # fmt: skip
    scale = cfg.scaling
    scaling = replace(scale, lora_alpha=scale.lora_alpha or 2.0 * scale.lora_rank)
    engine, sampling = cfg.engine, cfg.sampling
    if sampling.context == "chat":
        limit = positions(resolve_model(cfg.model), cfg.trust_remote_code)
        if limit and sampling.max_context_tokens > limit:
            note_once(f"--max-context-tokens {sampling.max_context_tokens} is more than the model's {limit} positions: "
                      f"conversations end at {limit} tokens")  # fmt: skip
            sampling = replace(sampling, max_context_tokens=limit)
    longest = sampling.max_context_tokens if sampling.context == "chat" else sampling.max_prompt_tokens + sampling.max_new_tokens
    engine = replace(engine, vllm_max_model_len=engine.vllm_max_model_len or longest,
                     sync_tolerance=tolerance_for(cfg.dtype, engine.sync_tolerance))  # fmt: skip
    advantages = replace(cfg.advantages, penalty_placement=penalty_placement(cfg.advantages, cfg.algo))
    return replace(cfg, output_dir=distributed.broadcast(output_dir, world), sft=replace(cfg.sft, sft_steps=sft_steps),
                   learner=learner, scaling=scaling, engine=engine, sampling=sampling, advantages=advantages)  # fmt: skip
