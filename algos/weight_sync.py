"""Weight-sync check: is the generation engine serving the weights the learner just trained?

A separate engine (vLLM) holds its own copy of the policy. If a sync silently fails (a
parameter name the engine does not map, a weight it repacked at load, a dtype cast), rollouts keep
coming from a stale policy and the PPO ratios quietly lie. The check: the engine samples
responses to a probe batch of real prompts, the trainer scores the same token ids with the
same formula, and the largest absolute logprob difference must stay under a tolerance set
by the dtype (float32 engines agree with the trainer to ~1e-5; bf16 to a few 1e-2).
Above it, training stops with a clear message instead of training on a stale policy.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from agents.backend import Backend
from agents.generation import Sampling
from algos.distributed import SINGLE, all_max
from algos.logprobs import Sample, collate, response_logprobs

TOLERANCE = {"float32": 1e-3, "bfloat16": 0.25, "float16": 0.1}


class SyncError(RuntimeError):
    """The engine's logprobs disagree with the trainer's after a weight sync."""


def probe_prompts(prompts: list[list[int]], size: int) -> list[list[int]]:
    """Up to `size` prompts spread evenly over `prompts` (real ones, from the run itself)."""
    return prompts[:: max(1, len(prompts) // size)][:size]


def tolerance_for(dtype: str, override: float = 0.0) -> float:
    return override if override > 0 else TOLERANCE[dtype]


@torch.no_grad()
def logprob_gap(backend: Backend, model, prompts: list[list[int]], sampling: Sampling, temperature: float,
                pad_id: int, vocab: int | None = None):  # fmt: skip
    """Max and mean |engine logprob - trainer logprob| over the tokens the engine samples for `prompts`.

    Top-p is switched off for the probe: the engine then reports log softmax(logits / T),
    exactly what the trainer computes (greedy sampling reports it at T = 1)."""
    responses, engine_logps = backend.generate(prompts, replace(sampling, top_p=1.0))
    samples = [Sample(p, r, 0.0, lp) for p, r, lp in zip(prompts, responses, engine_logps) if r]
    device = next(model.parameters()).device
    # No sampled token: score a masked-out pad token anyway, since a sharded model's forward is a
    # collective that every rank must join.
    batch = collate(samples or [Sample([pad_id], [pad_id], 0.0, [0.0])], pad_id, device)
    if not samples:
        batch["mask"].zero_()
    was_training = model.training
    model.eval()
    trainer_logp, _ = response_logprobs(model, batch, temperature, vocab=vocab)
    model.train(was_training)
    diff = (trainer_logp.float() - batch["old"]).abs() * batch["mask"]
    tokens = batch["mask"].sum()
    return {
        "sync/logprob_diff_max": float(diff.max()),
        "sync/logprob_diff_mean": float(diff.sum() / tokens.clamp(min=1)),
        "sync/probe_tokens": float(tokens),
    }


def check_gap(stats: dict[str, float], tolerance: float, when: str) -> None:
    gap = stats["sync/logprob_diff_max"]
    if not gap <= tolerance:  # also catches NaN
        raise SyncError(
            f"{when}: the generation engine and the trainer disagree on the probe batch "
            f"(max |logprob difference| {gap:.3g} > tolerance {tolerance:.3g}): the engine is not "
            "serving the trained weights, so rollouts would come from a stale policy. Check that every "
            "parameter name of the model loads into the engine, or raise --sync-tolerance if a "
            "low-precision dtype explains the gap."
        )


def sync_backend(agent, model, cfg, run, it: int, probe: list[list[int]], check: bool, world=SINGLE) -> str | None:
    """Push the new weights to the generation engine; on a check, prove it serves them (under
    torchrun every rank checks its own engine and the worst gap counts). Returns what is wrong
    (the engine serves other weights: the run cannot go on) or None."""
    agent.backend.sync(model)
    if not (check and probe and cfg.engine.backend != "hf"):  # the HF backend samples from the model itself
        return None
    stats = logprob_gap(
        agent.backend, model, probe, agent.sampling, cfg.sampling.sampling().score_temperature, agent.tokenizer.pad_token_id,
        len(agent.tokenizer),
    )  # fmt: skip
    stats["sync/logprob_diff_max"] = all_max(stats["sync/logprob_diff_max"], world)
    run.log(it, stats)
    try:
        check_gap(stats, cfg.engine.sync_tolerance, f"iteration {it}")
    except SyncError as e:
        return str(e)
    return None
