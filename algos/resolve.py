"""What every "unset" option means for this run, filled in once, before anything reads it.

A flag left unset (`--sft-steps`, `--min-update-samples`, `--output-dir`) or set to `auto`
(`--autocast`, `--rollout-is`) has a meaning that depends on the run: its model, its device, its
env, its clock. `resolve` works each out in one place and returns the config with the values
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
    lora_alpha          2 x lora_rank (with LoRA)
    vllm_max_model_len  max_prompt_tokens + max_new_tokens
    sync_tolerance      by dtype (algos/weight_sync.py TOLERANCE: float32 1e-3, bf16 0.25, fp16 0.1)
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from agents.model import parameter_count, precision, resolve_model
from algos import distributed
from algos.config import DEFAULT_SFT_STEPS, Config
from algos.run_dir import TRAINER_STATE
from algos.sft import has_expert
from algos.weight_sync import tolerance_for


def resolve(cfg: Config, world: distributed.World, device: str) -> Config:
    """`cfg` with every unset or auto option resolved for this run on `device` (the model is built
    or downloaded first, where it has to be: its size decides --autocast auto)."""
    output_dir = cfg.output_dir or f"runs/{cfg.env.split(':')[-1]}-{cfg.algo}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    sft_steps = cfg.sft.sft_steps
    if sft_steps is None:
        warmed = (Path(cfg.model).expanduser() / TRAINER_STATE).exists()
        sft_steps = 0 if warmed or not has_expert(cfg) else DEFAULT_SFT_STEPS
    autocast = cfg.learner.autocast
    if autocast == "auto":
        autocast = precision("auto", device, parameter_count(resolve_model(cfg.model), cfg.trust_remote_code))
    rollout_is = cfg.learner.rollout_is
    if rollout_is == "auto":
        # a separate engine samples from its own copy of the policy, and in bf16 the HF backend's cached decode
        # rounds differently from the learner's full forward (SmolLM2: first-update token ratios up to 1.16);
        # float32 HF rollouts match the learner (1 + 2e-5)
        rollout_is = "token" if cfg.engine.backend == "vllm" or autocast == "bf16" else "off"
    min_update = cfg.data.group_size if cfg.learner.min_update_samples is None else cfg.learner.min_update_samples
    learner = replace(cfg.learner, autocast=autocast, rollout_is=rollout_is, min_update_samples=min_update)
    scale = cfg.scaling
    scaling = replace(scale, lora_alpha=scale.lora_alpha or 2.0 * scale.lora_rank)
    engine, sampling = cfg.engine, cfg.sampling
    engine = replace(engine, vllm_max_model_len=engine.vllm_max_model_len or sampling.max_prompt_tokens + sampling.max_new_tokens,
                     sync_tolerance=tolerance_for(cfg.dtype, engine.sync_tolerance))  # fmt: skip
    return replace(cfg, output_dir=distributed.broadcast(output_dir, world), sft=replace(cfg.sft, sft_steps=sft_steps),
                   learner=learner, scaling=scaling, engine=engine)  # fmt: skip
