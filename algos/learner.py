"""Learner: PPO-clip on per-step samples, token-level loss over response tokens only.

Each env step is one sample (prompt ids, response ids, advantage, old logprobs); the
advantage of the step is broadcast over its response tokens. Per token:

    ratio = exp(logp - old_logp)
    loss  = -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A)
            + beta * k3(logp, ref_logp),     k3 = exp(ref - logp) - (ref - logp) - 1

Aggregation (TRL's `loss_type` names and meanings):
    grpo     mean over each sequence's tokens, then mean over sequences
    dr_grpo  sum over all tokens / (sequences x max_new_tokens)   (Dr. GRPO)
    dapo     sum over all tokens / tokens in the mini-batch        (DAPO, token-level)

Micro-batches accumulate gradients against the *mini-batch* normaliser, so the gradient
equals the one of the whole mini-batch in one pass, however it is split. Old logprobs come
from the rollout: the HF backend computes them with the same model and formula, so the
first mini-batch starts at ratio 1 (the reference for other backends is the trainer's
own recomputation).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

LOSS_TYPES = ("grpo", "dr_grpo", "dapo")


@dataclass(frozen=True)
class Sample:
    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    old_logprobs: list[float]


@dataclass(frozen=True)
class LearnerConfig:
    lr: float = 3e-4
    weight_decay: float = 0.0
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    beta: float = 0.0
    loss_type: str = "dapo"
    ppo_epochs: int = 1
    num_minibatches: int = 2
    micro_batch_size: int = 64
    max_grad_norm: float = 1.0
    warmup_steps: int = 0  # linear LR warm-up: Adam's first steps are full-size sign steps
    temperature: float = 1.0
    max_new_tokens: int = 24  # dr_grpo's constant normaliser


def collate(samples: list[Sample], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Left-pad prompt+response so every response ends at the last column."""
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    resp = max(len(s.response_ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(samples), width), dtype=torch.long)
    targets = torch.full((len(samples), resp), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), resp))
    old = torch.zeros((len(samples), resp))
    for row, s in enumerate(samples):
        seq = s.prompt_ids + s.response_ids
        ids[row, width - len(seq) :] = torch.tensor(seq)
        attn[row, width - len(seq) :] = 1
        n = len(s.response_ids)
        if n:
            targets[row, resp - n :] = torch.tensor(s.response_ids)
            mask[row, resp - n :] = 1.0
            old[row, resp - n :] = torch.tensor(s.old_logprobs, dtype=torch.float)
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float)
    batch = dict(ids=ids, attn=attn, targets=targets, mask=mask, old=old, adv=adv)
    return {k: v.to(device) for k, v in batch.items()}


def response_logprobs(model, batch: dict, temperature: float = 1.0, with_entropy: bool = False):
    """Per-token logprobs of the response tokens: ([B, R], entropy [B, R] or None)."""
    resp = batch["targets"].shape[1]
    positions = (batch["attn"].cumsum(-1) - 1).clamp(min=0)
    # Only the last resp+1 positions are needed: skip the LM head over the prompt.
    out = model(
        input_ids=batch["ids"],
        attention_mask=batch["attn"],
        position_ids=positions,
        logits_to_keep=resp + 1,
    )
    logits = out.logits[:, -resp - 1 : -1, :].float() / temperature  # [B, R, V]
    logp_all = torch.log_softmax(logits, -1)
    logp = logp_all.gather(-1, batch["targets"][..., None])[..., 0]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def ppo_token_loss(
    logp: torch.Tensor,  # [B, R]
    old_logp: torch.Tensor,  # [B, R]
    adv: torch.Tensor,  # [B]
    epsilon: float,
    epsilon_high: float,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token PPO-clip loss (+ beta * k3 KL) and per-token diagnostics."""
    a = adv[:, None]
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    loss = -torch.min(ratio * a, clipped * a)
    log_ratio = (old_logp - logp).detach()
    info = {
        "ratio": ratio.detach(),
        "clipped": ((ratio < 1 - epsilon) & (a < 0)) | ((ratio > 1 + epsilon_high) & (a > 0)),
        "approx_kl": torch.exp(log_ratio) - log_ratio - 1,  # k3 of KL(current || old)
    }
    if ref_logp is not None:
        d = ref_logp - logp
        kl = torch.exp(d) - d - 1
        loss = loss + beta * kl
        info["kl"] = kl.detach()
    return loss, info


def aggregate(
    token_loss: torch.Tensor,  # [B, R]
    mask: torch.Tensor,  # [B, R]
    loss_type: str,
    num_seqs: int,
    num_tokens: int,
    max_new_tokens: int,
) -> torch.Tensor:
    """This micro-batch's share of the mini-batch loss (normalisers are mini-batch wide)."""
    masked = token_loss * mask
    if loss_type == "dapo":
        return masked.sum() / max(num_tokens, 1)
    if loss_type == "dr_grpo":
        return masked.sum() / (num_seqs * max_new_tokens)
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).sum() / num_seqs
    raise ValueError(f"unknown loss_type {loss_type!r}; choose one of {LOSS_TYPES}")


class Learner:
    def __init__(self, model, cfg: LearnerConfig, pad_id: int, ref_model=None, seed: int = 0):
        self.model, self.cfg, self.pad_id, self.ref_model = model, cfg, pad_id, ref_model
        self.device = next(model.parameters()).device
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        warmup = max(cfg.warmup_steps, 1)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: min(1.0, (step + 1) / warmup))
        self.rng = random.Random(seed)

    def update(self, samples: list[Sample]) -> dict[str, float]:
        """ppo_epochs x num_minibatches optimizer steps over the samples."""
        cfg = self.cfg
        self.model.train()
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}

        def add(name: str, value: float, weight: float = 1.0) -> None:
            sums[name] = sums.get(name, 0.0) + value * weight
            counts[name] = counts.get(name, 0.0) + weight

        samples = [s for s in samples if s.response_ids]
        for _ in range(cfg.ppo_epochs):
            order = list(range(len(samples)))
            self.rng.shuffle(order)
            n_mb = min(cfg.num_minibatches, len(order))
            for mb in range(n_mb):
                mini = [samples[i] for i in order[mb::n_mb]]
                loss, stats = self._step(mini)
                add("train/loss", loss)
                for k, (v, w) in stats.items():
                    add(k, v, w)
        out = {k: sums[k] / counts[k] for k in sums if counts[k] > 0}
        # With beta == 0 no reference model exists; train/kl then measures the drift from
        # the rollout policy (the same estimate as train/approx_kl).
        out.setdefault("train/kl", out.get("train/approx_kl", 0.0))
        return out

    def _step(self, mini: list[Sample]) -> tuple[float, dict[str, tuple[float, float]]]:
        cfg = self.cfg
        num_tokens = sum(len(s.response_ids) for s in mini)
        mini = sorted(mini, key=lambda s: len(s.prompt_ids) + len(s.response_ids))
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        acc = {k: [0.0, 0.0] for k in ("ratio", "clipped", "approx_kl", "kl", "entropy")}
        ratio_max = 0.0
        for start in range(0, len(mini), cfg.micro_batch_size):
            batch = collate(mini[start : start + cfg.micro_batch_size], self.pad_id, self.device)
            logp, entropy = response_logprobs(self.model, batch, cfg.temperature, True)
            ref = None
            if self.ref_model is not None and cfg.beta > 0:
                with torch.no_grad():
                    ref, _ = response_logprobs(self.ref_model, batch, cfg.temperature)
            tok_loss, info = ppo_token_loss(
                logp, batch["old"], batch["adv"], cfg.epsilon, cfg.epsilon_high, ref, cfg.beta
            )
            loss = aggregate(tok_loss, batch["mask"], cfg.loss_type, len(mini), num_tokens, cfg.max_new_tokens)
            loss.backward()
            total += float(loss.detach())
            m = batch["mask"]
            info["entropy"] = entropy
            for k, v in info.items():
                acc[k][0] += float((v.float() * m).sum())
                acc[k][1] += float(m.sum())
            ratio_max = max(ratio_max, float((info["ratio"] * m).max()))
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        if not math.isfinite(float(grad_norm)):
            # a non-finite gradient would poison the weights: skip this step entirely
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.optimizer.step()
            self.scheduler.step()
        stats = {f"train/{k}": (s / n, n) for k, (s, n) in acc.items() if n > 0}
        stats["train/clip_frac"] = stats.pop("train/clipped")
        stats["train/ratio_mean"] = stats.pop("train/ratio")
        stats["train/ratio_max"] = (ratio_max, 1.0)
        stats["train/grad_norm"] = (float(grad_norm), 1.0)
        stats["train/lr"] = (self.scheduler.get_last_lr()[0], 1.0)
        stats["train/skipped_frac"] = (float(not math.isfinite(float(grad_norm))), 1.0)  # of optimizer steps
        return total, stats

    def sft_step(self, samples: list[Sample]) -> float:
        """One supervised step: token-mean negative log-likelihood of the responses."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        num_tokens = sum(len(s.response_ids) for s in samples)
        total = 0.0
        for start in range(0, len(samples), self.cfg.micro_batch_size):
            batch = collate(samples[start : start + self.cfg.micro_batch_size], self.pad_id, self.device)
            logp, _ = response_logprobs(self.model, batch)
            loss = -(logp * batch["mask"]).sum() / num_tokens
            loss.backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        return total
