"""Learner: PPO-clip on per-step samples, token-level loss over response tokens only.

Each env step is one sample (prompt ids, response ids, advantage, old logprobs); the
advantage of the step is broadcast over its response tokens. Per token:

    ratio = exp(logp - old_logp)                 (GSPO: exp(mean over the sequence))
    loss  = -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon_high) * A)
            [A < 0 and clip_ratio_c: at most -clip_ratio_c * A]      (dual clip)
            + beta * KL(logp, ref_logp)  (k1 / k2 / k3 estimator)
            - entropy_coef * entropy
    [rollout_is: token loss x w, w = pi_trainer / pi_rollout truncated or masked at a cap,
     with the trainer's recomputed logprobs as old_logp]

Aggregation (TRL's `loss_type` names and meanings):
    grpo     mean over each sequence's tokens, then mean over sequences
    dr_grpo  sum over all tokens / (sequences x max_new_tokens)   (Dr. GRPO)
    dapo     sum over all tokens / tokens in the mini-batch        (DAPO, token-level)

Micro-batches accumulate gradients against the *mini-batch* normaliser, so the gradient
equals the one of the whole mini-batch in one pass, however it is split. Under torchrun the
normalisers are global (summed over ranks) and each rank's loss is scaled by the world size,
because DDP and FSDP average gradients: N ranks then take the step one process would take on
all their samples (algos/distributed.py). Old logprobs come
from the rollout: the HF backend computes them with the same model and formula, so the
first mini-batch starts at ratio 1 (the reference for other backends is the trainer's
own recomputation).
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from dataclasses import replace

import torch

from agents.generation import SamplingConfig
from agents.model import autocast
from agents.stopwatch import Stopwatch
from algos.config import KL_ESTIMATORS, LOSS_TYPES, Config, LearnerConfig
from algos.distributed import SINGLE, World, aligned_chunks, all_max, all_sum, gather, load_optimizer_state
from algos.logprobs import Sample, batch_order, collate, response_logprobs
from algos.stats import Stats


def turn_sums(x: torch.Tensor, mask: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
    """Per turn (an episode's reply; `turn` [B, R] numbers them across the batch, -1 off the mask): the sum
    of x over its trained tokens, spread back to each of them ([B, R]; 0 off the mask)."""
    index = turn.clamp(min=0).flatten()
    sums = torch.zeros(int(turn.max()) + 1 if turn.numel() else 0, dtype=x.dtype, device=x.device)
    sums = sums.index_add(0, index, (x * mask).flatten())
    return sums[index].view_as(x) * mask


def turn_lengths(mask: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
    """Per trained token, the number of trained tokens in its turn (at least 1; [B, R])."""
    return turn_sums(torch.ones_like(mask), mask, turn).clamp(min=1)


def rollout_is_weights(
    trainer_logp: torch.Tensor,  # [B, R] the trainer's logprobs of the sampled tokens
    rollout_logp: torch.Tensor,  # [B, R] the generation engine's
    mask: torch.Tensor,  # [B, R]
    level: str,
    mode: str,
    cap: float,
    turn: torch.Tensor | None = None,  # [B, R]: episodes' turns (a "sequence" is one reply); None: rows
) -> tuple[torch.Tensor, dict[str, float]]:
    """Importance weights pi_trainer / pi_rollout that correct for the engine sampling from a
    slightly different policy: per token, or one per sequence (product over its tokens);
    above `cap` truncated to it or masked to 0 (a masked sequence loses all its tokens).
    Returns weights [B, R] (0 on padding) and stats of the ratios before truncation."""
    log_w = (trainer_logp - rollout_logp) * mask
    if level == "sequence":
        log_w = turn_sums(log_w, mask, turn) if turn is not None else log_w.sum(-1, keepdim=True).expand_as(log_w)
    elif level != "token":
        raise ValueError(f"unknown rollout_is level {level!r}; choose token or sequence")
    raw = torch.exp(log_w.clamp(max=30.0))  # a product of many tokens can overflow
    over = (raw > cap) & (mask > 0)
    if mode == "truncate":
        w = raw.clamp(max=cap)
    elif mode == "mask":
        w = torch.where(over, torch.zeros_like(raw), raw)
    else:
        raise ValueError(f"unknown rollout_is mode {mode!r}; choose truncate or mask")
    n = mask.sum().clamp(min=1)
    stats = {
        "rollout_is/ratio_mean": float((raw * mask).sum() / n),
        "rollout_is/ratio_max": float((raw * mask).max()) if mask.any() else 1.0,
        "rollout_is/ratio_min": float(torch.where(mask > 0, raw, torch.full_like(raw, float("inf"))).min())
        if mask.any()
        else 1.0,
        f"rollout_is/{'masked' if mode == 'mask' else 'truncated'}_frac": float(over.sum() / n),
    }
    return w * mask, stats


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from samples of the policy (Schulman's k1/k2/k3)."""
    d = ref_logp - logp  # log(ref / policy)
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        return torch.exp(d) - d - 1
    raise ValueError(f"unknown kl_estimator {estimator!r}; choose one of {KL_ESTIMATORS}")


def ppo_token_loss(
    logp: torch.Tensor,  # [B, R]
    old_logp: torch.Tensor,  # [B, R]
    adv: torch.Tensor,  # [B], or [B, R] (an advantage per token: episodes)
    epsilon: float,
    epsilon_high: float,
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    *,
    mask: torch.Tensor | None = None,  # [B, R], needed for importance="sequence"
    importance: str = "token",
    clip_ratio_c: float | None = None,
    kl_estimator: str = "k3",
    turn: torch.Tensor | None = None,  # [B, R]: episodes' turns (a "sequence" is one reply); None: rows
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token PPO-clip loss (+ beta * KL to the reference) and per-token diagnostics.

    importance="sequence" is GSPO: one ratio per sequence, exp(mean_t(logp - old_logp)),
    with each token's gradient flowing through its own logp. clip_ratio_c is dual-clip PPO:
    for negative advantages the loss is capped at -c * A, so a huge ratio cannot blow up.
    """
    a = adv[:, None] if adv.dim() == 1 else adv
    log_ratio = logp - old_logp  # [B, R]
    if importance == "sequence":
        if mask is None:
            raise ValueError("importance='sequence' needs the response mask")
        if turn is not None:  # one ratio per reply of an episode
            seq = turn_sums(log_ratio.detach(), mask, turn) / turn_lengths(mask, turn)
            log_ratio = seq + logp - logp.detach()
        else:
            seq = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]
            log_ratio = seq.detach()[:, None] + logp - logp.detach()  # value: the sequence's; gradient: the token's
    elif importance != "token":
        raise ValueError(f"unknown importance level {importance!r}; choose token or sequence")
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    loss = torch.maximum(-ratio * a, -clipped * a)
    low = (ratio < 1 - epsilon) & (a < 0)
    high = (ratio > 1 + epsilon_high) & (a > 0)
    info = {"ratio": ratio.detach(), "clipped": low | high, "clipped_low": low, "clipped_high": high}
    if clip_ratio_c is not None:
        dual = (a < 0) & (ratio > clip_ratio_c)
        loss = torch.where(dual, -clip_ratio_c * a, loss)
        info["dual_clipped"] = dual
    token_log_ratio = (old_logp - logp).detach()
    info["approx_kl"] = torch.exp(token_log_ratio) - token_log_ratio - 1  # k3 of KL(current || old)
    if ref_logp is not None:
        kl = kl_penalty(logp, ref_logp, kl_estimator)
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
    turn: torch.Tensor | None = None,
) -> torch.Tensor:
    """This micro-batch's share of the mini-batch loss (normalisers are mini-batch wide). A sequence
    is one reply: a row, or with `turn` ([B, R], episodes) one turn of an episode, so that an episode's
    replies weigh what the same replies weigh as step samples."""
    masked = token_loss * mask
    if loss_type == "dapo":
        return masked.sum() / max(num_tokens, 1)
    if loss_type == "dr_grpo":
        return masked.sum() / (num_seqs * max_new_tokens)
    if loss_type == "grpo" and turn is not None:
        return (masked / turn_lengths(mask, turn)).sum() / num_seqs
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).sum() / num_seqs
    raise ValueError(f"unknown loss_type {loss_type!r}; choose one of {LOSS_TYPES}")


def merge_ranks(per_rank: list[Stats]) -> dict[str, float]:
    """The ranks' update metrics -> one value each (algos/stats.py); train/loss adds up: each rank
    holds its share of the global loss."""
    return Stats.merge(per_rank, total=lambda key: key == "train/loss")


class Learner:
    """PPO-clip updates of `model` (the trained module: plain, DDP-wrapped or FSDP-sharded).

    The KL reference is `ref_model`, or with `adapter_reference` the model itself with its LoRA
    adapter switched off (no second copy of the weights)."""

    def __init__(self, model, cfg: LearnerConfig, pad_id: int, ref_model=None, seed: int = 0,
                 world: World = SINGLE, adapter_reference: bool = False, *, temperature: float = 1.0,
                 max_new_tokens: int = SamplingConfig.max_new_tokens, vocab: int = 0):  # fmt: skip
        """`cfg`: a resolved learner section (no `auto`: algos/resolve.py says what it means for a run; a
        learner used on its own passes rollout_is and autocast explicitly). `temperature`: the rollouts' (logits are divided by it);
        `max_new_tokens`: dr_grpo's constant normaliser; `vocab`: len(tokenizer), head rows beyond it
        are padding, never sampled or scored (0: all rows)."""
        if "auto" in (cfg.rollout_is, cfg.autocast):
            raise ValueError("the learner takes a resolved section: set rollout_is and autocast (a run resolves "
                             "them, algos/resolve.py)")  # fmt: skip
        self.model, self.cfg, self.pad_id, self.ref_model = model, cfg, pad_id, ref_model
        self.temperature, self.max_new_tokens, self.vocab = temperature, max_new_tokens, vocab
        self.rollout_is = cfg.rollout_is
        self.world, self.adapter_reference = world, adapter_reference
        self.device = next(model.parameters()).device
        trainable = [p for p in model.parameters() if p.requires_grad]  # LoRA: the adapter only
        self.optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay)
        warmup = max(cfg.warmup_steps, 1)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: min(1.0, (step + 1) / warmup))
        self.rng = random.Random(seed)
        self.clock = Stopwatch()  # the update's parts: old-logprob recompute, optimizer (time/*_s)
        # Shared prompts run the model with a KV cache in training: not under gradient checkpointing
        # (which turns the cache off) and not under DDP / FSDP, whose hooks expect one forward per backward.
        self.share = cfg.share_prompts and not world.enabled and not getattr(model, "is_gradient_checkpointing", False)

    @classmethod
    def for_run(cls, model, cfg: Config, pad_id: int, vocab: int, lr: float | None = None, **kwargs) -> Learner:
        """The learner of a run (`cfg` resolved, algos/resolve.py): its learner section (with `lr`, the
        warm-up's), scoring at the rollouts' temperature (greedy rollouts, T=0, score at T=1)."""
        section = replace(cfg.learner, lr=lr or cfg.learner.lr)
        return cls(model, section, pad_id, temperature=cfg.sampling.sampling().score_temperature,
                   max_new_tokens=cfg.sampling.max_new_tokens, vocab=vocab, **kwargs)  # fmt: skip

    def anchor_reference(self) -> None:
        """The KL reference becomes the policy as it is now (a run calls it when its warm-up ends): each
        reference weight is set from the policy's (same architecture; under FSDP both are sharded alike,
        so each rank copies its own shards). Nothing to do without a reference model."""
        if self.ref_model is None:
            return
        policy = getattr(self.model, "module", self.model)  # DDP wraps; FSDP2 shards in place
        with torch.no_grad():
            for ref, weight in zip(self.ref_model.parameters(), policy.parameters(), strict=True):
                ref.copy_(weight)

    def load_state(self, optimizer: dict, scheduler: dict) -> None:
        """A checkpoint's optimizer moments and schedule position, under this learner's own lr, weight decay
        and warm-up (a fork may change them; the saved state would otherwise bring its run's back)."""
        load_optimizer_state(self.model, self.optimizer, optimizer)
        self.scheduler.load_state_dict(scheduler)
        self.scheduler.base_lrs = [self.cfg.lr for _ in self.optimizer.param_groups]
        scale = self.scheduler.lr_lambdas[0](self.scheduler.last_epoch)  # the schedule's factor where it stood
        for group in self.optimizer.param_groups:
            group.update(initial_lr=self.cfg.lr, lr=self.cfg.lr * scale, weight_decay=self.cfg.weight_decay)
        self.scheduler._last_lr = [group["lr"] for group in self.optimizer.param_groups]  # what get_last_lr reports

    def update(self, samples: list[Sample]) -> dict[str, float]:
        """ppo_epochs x num_minibatches optimizer steps over the samples."""
        cfg = self.cfg
        started = time.perf_counter()
        self.model.train()
        stats = Stats()
        samples = [s for s in samples if s.response_ids]
        n_global = int(all_sum([len(samples)], self.world)[0])
        n_mb = min(cfg.num_minibatches, n_global)  # the same on every rank (some may get none)
        orders = []
        for _ in range(cfg.ppo_epochs):
            orders.append(list(range(len(samples))))
            self.rng.shuffle(orders[-1])
        if self.rollout_is != "off" and n_global:
            with self.clock.section("recompute"):
                samples, is_stats = self._recompute_old_logprobs(samples, [orders[0][mb::n_mb] for mb in range(n_mb)])
            stats.absorb(is_stats)
        steps, stopped, backward_tokens, forward_tokens = 0, False, 0, 0
        for order in orders:
            for mb in range(n_mb):
                if stopped:
                    continue
                mini = [samples[i] for i in order[mb::n_mb]]
                loss, step_stats, stopped = self._step(mini)
                steps += not stopped
                backward_tokens += sum(s.trained_tokens for s in mini)
                forward_tokens += sum(len(s.prompt_ids) + len(s.response_ids) for s in mini)
                stats.add("train/loss", loss)
                stats.absorb(step_stats)
        stats.add("train/optimizer_steps", float(steps))
        # response tokens that went through a forward and backward pass, all ranks and epochs (the work done)
        stats.add("train/backward_tokens", float(all_sum([backward_tokens], self.world)[0]))
        # prompt + response tokens of those samples (before shared prompts are run once): what the learner reads
        stats.add("train/forward_tokens", float(all_sum([forward_tokens], self.world)[0]))
        stats.add("train/early_stopped", float(stopped))  # the KL target ended the epochs before the last planned step
        spent = self.clock.lap()  # where the update's seconds went: the rest is forward and backward passes
        spent["forward_backward"] = time.perf_counter() - started - sum(spent.values())
        for part in ("recompute", "forward_backward", "optimizer"):
            stats.add(f"time/{part}_s", spent.get(part, 0.0))
        out = merge_ranks(gather(stats, self.world))  # one rank: its own values
        # With beta == 0 no reference model exists; train/kl then measures the drift from
        # the rollout policy (the same estimate as train/approx_kl).
        out.setdefault("train/kl", out.get("train/approx_kl", 0.0))
        return out

    def _recompute_old_logprobs(self, samples: list[Sample], minis: list[list[int]]) -> tuple[list[Sample], Stats]:
        """The trainer's own logprobs become the PPO reference; pi_trainer / pi_rollout the weights
        (their statistics token-weighted over the chunks). `minis`: the first epoch's mini-batches (indices
        into `samples`), run in the very micro-batches `_step` runs (`_micro_batches`): under bf16 a sample's logprobs
        depend on its micro-batch (padding, the shared opening), and the first epoch's ratio is then exactly 1."""
        cfg = self.cfg
        out, stats = list(samples), Stats()
        with torch.no_grad():
            for mini in minis:
                rows: dict[int, list[int]] = {}  # a sample's position in `samples` (a sample held twice: both)
                for i in mini:
                    rows.setdefault(id(samples[i]), []).append(i)
                for chunk in self._micro_batches([samples[i] for i in mini]):
                    batch = collate(chunk or [self._dummy], self.pad_id, self.device, self.share)
                    with autocast(self.device, cfg.autocast):
                        logp, _ = response_logprobs(self.model, batch, self.temperature, vocab=self.vocab)
                    if chunk is None:  # this rank has run out: the pass only keeps the collectives in step
                        continue
                    w, st = rollout_is_weights(logp, batch["old"], batch["mask"], self.rollout_is, cfg.rollout_is_mode,
                                               cfg.rollout_is_cap, batch.get("turn"))  # fmt: skip
                    tokens = float(batch["mask"].sum())
                    for k, v in st.items():
                        stats.add(k, v, tokens)
                    for row, s in enumerate(chunk):
                        n = len(s.response_ids)
                        out[rows[id(s)].pop(0)] = replace(s, old_logprobs=logp[row, -n:].tolist(),
                                                          is_weights=w[row, -n:].tolist())  # fmt: skip
        return out, stats

    def _micro_batches(self, mini: list[Sample]) -> list[list[Sample] | None]:
        """A mini-batch's micro-batches, as both the old-logprob recompute and `_step` run them: sorted
        (batch_order), then cut (`_chunks`)."""
        return self._chunks(batch_order(mini, self.share))

    def _chunks(self, samples: list[Sample]) -> list[list[Sample] | None]:
        """Micro-batches, the same count on every rank: micro_batch_size samples each, and with
        micro_batch_tokens at most that many padded tokens (rows x the longest row) too: episodes differ
        in length far more than steps do. The samples come sorted by length (batch_order)."""
        tokens = self.cfg.micro_batch_tokens
        if not tokens:
            return aligned_chunks(samples, self.cfg.micro_batch_size, self.world)
        chunks: list[list[Sample]] = []
        longest = 0
        for s in samples:
            size = len(s.prompt_ids) + len(s.response_ids)
            if chunks and len(chunks[-1]) < self.cfg.micro_batch_size and max(longest, size) * (len(chunks[-1]) + 1) <= tokens:
                chunks[-1].append(s)
                longest = max(longest, size)
            else:
                chunks.append([s])
                longest = size
        return chunks + [None] * (all_max(len(chunks), self.world) - len(chunks))

    @property
    def _dummy(self) -> Sample:
        """A one-token sample whose loss is multiplied by 0: a pass that changes nothing."""
        return Sample([self.pad_id], [self.pad_id], 0.0, [0.0])

    def _reference_logprobs(self, batch: dict) -> torch.Tensor | None:
        if self.cfg.beta <= 0 or (self.ref_model is None and not self.adapter_reference):
            return None
        with torch.no_grad(), autocast(self.device, self.cfg.autocast):
            if self.ref_model is not None:
                return response_logprobs(self.ref_model, batch, self.temperature, vocab=self.vocab)[0]
            with getattr(self.model, "module", self.model).disable_adapter():  # the base model
                return response_logprobs(self.model, batch, self.temperature, vocab=self.vocab)[0]

    def _accumulation(self, last: bool):
        """DDP all-reduces gradients on every backward unless told not to: only on the last micro-batch."""
        if last or not hasattr(self.model, "no_sync"):
            return contextlib.nullcontext()
        return self.model.no_sync()

    def _step(self, mini: list[Sample]) -> tuple[float, Stats, bool]:
        """One optimizer step on a mini-batch: (loss, stats, stopped). stopped: the mini-batch's approx
        KL to the rollout policy, measured before the step, is past target_kl, so no step was taken (PPO's
        early stop: the policy has moved far enough for this batch)."""
        cfg = self.cfg
        # Normalisers of the whole (global) mini-batch; x world size because ranks average gradients.
        num_seqs, num_tokens = (int(v) for v in all_sum([sum(s.turns for s in mini),
                                                          sum(s.trained_tokens for s in mini)], self.world))  # fmt: skip
        scale = float(self.world.size)
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        acc = {k: [0.0, 0.0] for k in ("ratio", "clipped", "clipped_low", "clipped_high", "dual_clipped",
                                       "approx_kl", "kl", "entropy")}  # fmt: skip
        ratio_max = 0.0
        chunks = self._micro_batches(mini)
        for n, chunk in enumerate(chunks):
            batch = collate(chunk or [self._dummy], self.pad_id, self.device, self.share)
            with self._accumulation(last=n == len(chunks) - 1):
                with autocast(self.device, cfg.autocast):
                    logp, entropy = response_logprobs(self.model, batch, self.temperature, True, cfg.entropy_coef > 0,
                                                        self.vocab)  # fmt: skip
                ref = self._reference_logprobs(batch)
                tok_loss, info = ppo_token_loss(
                    logp, batch["old"], batch["adv"], cfg.epsilon, cfg.epsilon_high, ref, cfg.beta,
                    mask=batch["mask"], importance=cfg.importance_sampling_level,
                    clip_ratio_c=cfg.clip_ratio_c, kl_estimator=cfg.kl_estimator, turn=batch.get("turn"),
                )  # fmt: skip
                if cfg.entropy_coef > 0:
                    tok_loss = tok_loss - cfg.entropy_coef * entropy
                tok_loss = tok_loss * batch["w"]  # rollout-correction weights (1 unless rollout_is is on)
                loss = aggregate(tok_loss, batch["mask"], cfg.loss_type, num_seqs, num_tokens, self.max_new_tokens,
                                 batch.get("turn"))  # fmt: skip
                (loss * (scale if chunk is not None else 0.0)).backward()
            if chunk is None:  # a dummy pass: no samples, no statistics
                continue
            total += float(loss.detach())
            m = batch["mask"]
            info["entropy"] = entropy.detach()
            for k, v in info.items():
                acc[k][0] += float((v.float() * m).sum())
                acc[k][1] += float(m.sum())
            ratio_max = max(ratio_max, float((info["ratio"] * m).max()))
        kl_sum, kl_n = all_sum(acc["approx_kl"], self.world)  # every rank decides alike
        stopped = cfg.target_kl > 0 and kl_n > 0 and kl_sum / kl_n > cfg.target_kl
        with self.clock.section("optimizer"):
            grad_norm = clip_grad_norm(self.model, cfg.max_grad_norm)
            if stopped or not math.isfinite(grad_norm):
                # past the KL target, or a non-finite gradient that would poison the weights: no step
                self.optimizer.zero_grad(set_to_none=True)
            else:
                self.optimizer.step()
                self.scheduler.step()
        stats = Stats()
        renamed = {"clipped": "clip_frac", "clipped_low": "clip_frac_low", "clipped_high": "clip_frac_high",
                   "dual_clipped": "dual_clip_frac", "ratio": "ratio_mean"}  # fmt: skip
        for k, (s, n) in acc.items():  # a rank with no samples in this mini-batch has none of them
            if n > 0:
                stats.add(f"train/{renamed.get(k, k)}", s / n, n)
        stats.add("train/ratio_max", ratio_max)
        stats.add("train/grad_norm", grad_norm)
        stats.add("train/lr", self.scheduler.get_last_lr()[0])
        stats.add("train/skipped_frac", float(not math.isfinite(grad_norm)))  # of optimizer steps
        return total, stats, stopped

    def sft_step(self, samples: list[Sample]) -> float:
        """One supervised step: token-mean negative log-likelihood of the responses. Every rank gets
        the same batch and trains on its slice of it, against the whole batch's token count."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        num_tokens = sum(s.trained_tokens for s in samples)
        mine = samples[self.world.rank :: self.world.size]
        chunks = self._chunks(mine)
        total = 0.0
        for n, chunk in enumerate(chunks):
            batch = collate(chunk or [self._dummy], self.pad_id, self.device, self.share)
            with self._accumulation(last=n == len(chunks) - 1):
                with autocast(self.device, self.cfg.autocast):
                    logp, _ = response_logprobs(self.model, batch, vocab=self.vocab)
                loss = -(logp * batch["mask"]).sum() / num_tokens
                (loss * (self.world.size if chunk is not None else 0.0)).backward()
            total += float(loss.detach()) if chunk is not None else 0.0
        clip_grad_norm(self.model, self.cfg.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        return all_sum([total], self.world)[0]


def clip_grad_norm(model, max_norm: float) -> float:
    """Clip the trainable parameters' gradients to `max_norm` (global over FSDP shards); the norm before."""
    params = [p for p in model.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # FSDP: a replicated DTensor
