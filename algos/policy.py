"""The policy a run trains and the agent that samples from it, built from a resolved config: what
training (algos/run.py), scripts/evaluate.py and the benchmarks load a model through.

`build_policy` loads the tokenizer and the model (a LoRA adapter added with --lora-rank, gradient
checkpointing on request), wraps it for torchrun (FSDP2 or DDP; algos/distributed.py), starts the
generation backend (the HF reference, or an in-process vLLM engine serving the same weights) and
puts a prompt builder and the action format of the env in front of it (agents/agent.py).
"""

from __future__ import annotations

import copy
import random

import torch

from agents.agent import LLMAgent
from agents.backend import HFBackend
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
from agents.tools import ActionFormat
from algos import distributed
from algos.config import Config, ConfigError
from envs import env_metadata, prompt_template
from envs.base import note_once


def build_policy(cfg: Config, world: distributed.World = distributed.SINGLE, device: str | None = None):
    """(policy, tokenizer, agent) for a resolved `cfg` (algos/resolve.py). The policy is the module the learner trains: LoRA-wrapped with
    --lora-rank, sharded or replicated under torchrun; the agent samples from it (or, when it is
    sharded and the backend is HF, from a full copy refreshed after each update)."""
    if "auto" in (cfg.learner.autocast, cfg.learner.rollout_is):
        raise ValueError("build_policy takes a resolved config: call algos.resolve.resolve first")
    torch.manual_seed(cfg.seed)  # the same initial weights (and LoRA init) on every rank
    random.seed(cfg.seed)
    device = device or distributed.device_for(cfg.device, world)
    scale, path = cfg.scaling, resolve_model(cfg.model)
    try:  # a hub model's tokenizer is checked here, once downloaded (a folder's before the run: checkpoint.check)
        tokenizer = load_tokenizer(path, cfg.trust_remote_code)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if world.main:
        for note in template_notes(tokenizer):  # what the checkpoint's chat template does to prompts
            note_once(note)
    model = load_model(path, device, getattr(torch, cfg.dtype), cfg.trust_remote_code,
                       adapter="train" if scale.lora_rank else "merge")  # fmt: skip
    plain = None  # LoRA on the HF backend samples from a plain copy with the adapter merged in (backend.sync)
    if scale.lora_rank and cfg.engine.backend == "hf" and not world.enabled:
        plain = copy.deepcopy(model)  # before the adapter is added; a loaded adapter is merged into the copy
        plain = plain.merge_and_unload() if hasattr(plain, "peft_config") else plain
    if scale.lora_rank and not hasattr(model, "peft_config"):
        try:
            model = add_lora(model, scale.lora_rank, scale.lora_alpha, scale.lora_dropout, scale.lora_target_modules)
        except ValueError as e:  # peft: no such module in this model
            raise ConfigError(f"--lora-target-modules {scale.lora_target_modules}: {str(e).splitlines()[0]}") from e
    if scale.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    sampler_model = model if plain is None else plain
    if world.enabled and scale.parallel == "fsdp":
        sampler_model = copy.deepcopy(model)
    policy = distributed.wrap(model, scale.parallel, world)
    eos = stop_ids(tokenizer, model)
    vocab = len(tokenizer)  # the head's rows beyond it (Qwen2.5: 271 of 151,936) are padding: never sampled
    sampling = cfg.sampling
    if cfg.engine.backend == "vllm":
        from agents.vllm_backend import VLLMBackend, adapter_rank, merge_note

        try:  # serve the LoRA adapter itself (a sync sends only it), or merge it in at every sync
            lora_rank, why = adapter_rank(cfg.engine, model)
        except ValueError as e:
            raise ConfigError(str(e)) from e
        if why and world.main:
            note_once(merge_note(why))
        served = adapter_base(path) if is_adapter(path) else path  # an adapter's engine starts from its base
        backend = VLLMBackend(served, eos, cfg.engine, on_gpu=device.startswith("cuda"), seed=cfg.seed + world.rank,
                              vocab=vocab, dtype=cfg.dtype, trust_remote_code=cfg.trust_remote_code,
                              max_model_len=cfg.engine.vllm_max_model_len,
                              external_launcher=world.enabled, lora_rank=lora_rank,
                              prefix_caching=sampling.context == "chat")  # fmt: skip
        if served != path:
            backend.sync(policy)
    else:
        backend = HFBackend(sampler_model, eos, tokenizer.pad_token_id, sampling.generation_batch_size,
                            cfg.seed + world.rank, cfg.learner.autocast, vocab,
                            reuse_prefixes=sampling.context == "chat",
                            share_opening=cfg.learner.share_prompts)  # fmt: skip
    template = prompt_template(cfg.env) if sampling.prompt_template == "auto" else sampling.prompt_template
    try:
        action_format = ActionFormat.for_env(sampling.action_format, env_metadata(cfg.env))
    except ValueError as e:
        raise ConfigError(f"{cfg.env}: {e}") from e
    prompts = PromptBuilder(sampling.memory, template=template, action_format=action_format)
    try:
        agent = LLMAgent(tokenizer, backend, prompts, sampling.sampling(), sampling.max_prompt_tokens, sampling.context,
                         sampling.max_context_tokens)  # fmt: skip
    except ValueError as e:  # --context chat with a template that rewrites earlier turns
        raise ConfigError(str(e)) from e
    return policy, tokenizer, agent
