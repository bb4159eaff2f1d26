"""A training model's full weights under their Hugging Face names: what an engine sync, the HF
backend's copy and a checkpoint need.

Two things stand between a model being trained and a plain checkpoint's state dict. Under FSDP each
rank holds only a shard: `full_state_dict` gathers them (a collective: every rank calls it). Under
LoRA the weights are a frozen base plus an adapter, under peft's names: `merged_state_dict` folds the
adapter in (W + scale * B @ A) and restores the base model's names. `hf_weights` does both. Loading
and wrapping models is agents/model.py; this module needs only torch.
"""

from __future__ import annotations

import math

import torch


def merged_state_dict(weights: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Hugging Face weights with the LoRA adapter folded in, W + scale * B @ A, from a peft model's
    (full) state dict; the model itself is not touched. Plain models' weights pass through."""
    if not hasattr(model, "peft_config"):
        return weights
    cfg = model.peft_config["default"]
    scale = cfg.lora_alpha / (math.sqrt(cfg.r) if cfg.use_rslora else cfg.r)
    prefix = "base_model.model."
    out = {}
    for name, w in weights.items():
        if ".lora_" in name:
            continue
        if name.endswith(".base_layer.weight"):
            module = name[: -len(".base_layer.weight")]
            a, b = weights[f"{module}.lora_A.default.weight"], weights[f"{module}.lora_B.default.weight"]
            w = (w.float() + scale * (b.float() @ a.float())).to(w.dtype)
            name = f"{module}.weight"
        out[name.replace(".base_layer.", ".").removeprefix(prefix)] = w
    return out


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether `model` is wrapped by FSDP2 (`fully_shard`), so each rank holds only a shard of its weights."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def full_state_dict(model: torch.nn.Module, rank0_only: bool = False) -> dict[str, torch.Tensor]:
    """The full, unsharded weights (a collective under FSDP: every rank must call it; they are
    gathered to CPU). `rank0_only`: other ranks get {} (when only rank 0 writes). An unsharded
    model's own state dict is returned as it is."""
    if not is_sharded(model):
        return getattr(model, "module", model).state_dict()  # DDP wraps the model in .module
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=rank0_only))


def hf_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full weights under their Hugging Face names, a LoRA adapter merged in: what an engine loads
    (a collective under FSDP)."""
    return merged_state_dict(full_state_dict(model), getattr(model, "module", model))
