"""Samples, their batches, and the policy's logprobs of the response tokens.

A `Sample` is one env step as the learner sees it: prompt ids, response ids, advantage, the
rollout's logprobs. `collate` lays a list of them out as tensors with every response ending at
the last column; `response_logprobs` runs the model over a batch and returns log softmax(logits
/ T) of each response token (and the entropy), which the PPO loss, the KL reference, the
rollout-correction weights and the weight-sync check all use.

Shared prompts: the rollouts of a group start from one prompt, and with a short memory they
meet again in equal states, so many samples of a batch have the same prompt (about half of a
KeyDoor batch). With `share_prompts`, `collate` keeps each distinct prompt once: the model runs
over the distinct prompts (all but their last token), the KV cache rows are copied to the
samples (an index_select, whose backward sums the copies' gradients), and a second pass runs
each sample's last prompt token plus response with that cache. Logprobs and gradients are those
of the full pass up to float rounding (tests/test_learner.py); the work on prompts shrinks by the
number of copies. It needs a model that takes `past_key_values` in training, so the learner
turns it off under gradient checkpointing and under torchrun.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from algos import lm_head


@dataclass(frozen=True)
class Sample:
    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    old_logprobs: list[float]
    is_weights: list[float] | None = None  # rollout-correction weights per token (None = 1)


def _left_pad(rows: list[list[int]], width: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for row, seq in enumerate(rows):
        if seq:
            ids[row, width - len(seq) :] = torch.tensor(seq)
            attn[row, width - len(seq) :] = 1
    return ids, attn


def collate(samples: list[Sample], pad_id: int, device, share_prompts: bool = False) -> dict[str, torch.Tensor]:
    """Left-pad prompt+response so every response ends at the last column. With `share_prompts`
    and a repeated prompt, the layout is prefix (distinct prompts minus their last token) +
    suffix (last prompt token + response minus its last token) instead of ids/attn."""
    resp = max(len(s.response_ids) for s in samples)
    targets, mask = _left_pad([s.response_ids for s in samples], resp, pad_id)
    mask = mask.float()
    old = torch.zeros((len(samples), resp))
    weights = torch.ones((len(samples), resp))
    for row, s in enumerate(samples):
        n = len(s.response_ids)
        if n:
            old[row, resp - n :] = torch.tensor(s.old_logprobs, dtype=torch.float)
            if s.is_weights is not None:
                weights[row, resp - n :] = torch.tensor(s.is_weights, dtype=torch.float)
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float)
    batch = dict(targets=targets, mask=mask, old=old, adv=adv, w=weights)
    distinct: dict[tuple[int, ...], int] = {}
    if share_prompts and all(len(s.prompt_ids) >= 2 for s in samples):
        index = [distinct.setdefault(tuple(s.prompt_ids[:-1]), len(distinct)) for s in samples]
    if distinct and len(distinct) < len(samples):
        batch["prefix_ids"], batch["prefix_attn"] = _left_pad([list(p) for p in distinct], max(map(len, distinct)),
                                                              pad_id)  # fmt: skip
        batch["index"] = torch.tensor(index)
        suffixes = [s.prompt_ids[-1:] + s.response_ids[:-1] for s in samples]  # row j predicts target j
        batch["suffix_ids"], batch["suffix_attn"] = _left_pad(suffixes, resp, pad_id)
    else:
        width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
        batch["ids"], batch["attn"] = _left_pad([s.prompt_ids + s.response_ids for s in samples], width, pad_id)
    return {k: v.to(device) for k, v in batch.items()}


def batch_order(samples: list[Sample], share_prompts: bool = False) -> list[Sample]:
    """The samples in the order micro-batches are cut from: by length (little padding), or with
    `share_prompts` equal prompts side by side, so that a micro-batch holds all their copies."""
    if share_prompts:
        return sorted(samples, key=lambda s: (len(s.prompt_ids), s.prompt_ids, len(s.response_ids)))
    return sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.response_ids))


def response_logprobs(
    model, batch: dict, temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False,
    vocab: int | None = None,
):  # fmt: skip
    """Per-token logprobs of the response tokens under softmax(logits[:vocab] / T): ([B, R], entropy
    [B, R] or None). `vocab` = len(tokenizer): padded rows of the head are not tokens (None: all rows).
    Where algos/lm_head.py applies, the head runs chunk by chunk and [B, R, V] logits never exist."""
    resp = batch["targets"].shape[1]
    vocab = vocab or None  # 0, like None: every row
    chunked = lm_head.applies(model)

    def head(targets, temperature=1.0):  # the chunked head for one forward, or the model's own
        if not chunked:
            return contextlib.nullcontext()
        return lm_head.scoring(model, targets, temperature, vocab, with_entropy, entropy_grad)

    if "prefix_ids" in batch:  # shared prompts: the distinct prefixes once, then each suffix on their cache
        prefix_attn = batch["prefix_attn"]
        # The prefix pass is for its KV cache: its head output is never used (skipped where chunked).
        with head(None):
            prefix = model(input_ids=batch["prefix_ids"], attention_mask=prefix_attn,
                           position_ids=(prefix_attn.cumsum(-1) - 1).clamp(min=0), use_cache=True,
                           logits_to_keep=1)  # fmt: skip
        cache = prefix.past_key_values
        cache.reorder_cache(batch["index"])  # [U, ...] -> [B, ...], differentiable
        attn = torch.cat([prefix_attn[batch["index"]], batch["suffix_attn"]], 1)  # [B, P + R]
        with head(batch["targets"], temperature):
            out = model(input_ids=batch["suffix_ids"], attention_mask=attn,
                        position_ids=(attn.cumsum(-1) - 1).clamp(min=0)[:, -resp:], past_key_values=cache,
                        use_cache=True)  # fmt: skip
        scored = out.logits  # [B, R, ...]: column j predicts target j
    else:
        positions = (batch["attn"].cumsum(-1) - 1).clamp(min=0)
        width = batch["ids"].shape[1]
        # Only the positions that predict a response token go through the head (not the prompt's).
        keep = torch.arange(width - resp - 1, width - 1, device=batch["ids"].device)
        with head(batch["targets"], temperature):
            out = model(input_ids=batch["ids"], attention_mask=batch["attn"], position_ids=positions,
                        logits_to_keep=keep)  # fmt: skip
        scored = out.logits  # [B, R, ...]
    if chunked:
        return scored[..., 0], scored[..., 1] if with_entropy else None
    logp_all = torch.log_softmax(scored[..., :vocab].float() / temperature, -1)  # [B, R, V]
    logp = logp_all.gather(-1, batch["targets"][..., None])[..., 0]
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
