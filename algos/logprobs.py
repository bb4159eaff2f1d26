"""Samples, their batches, and the policy's logprobs of the response tokens.

A `Sample` is one env step as the learner sees it: prompt ids, response ids, advantage, the
rollout's logprobs; in the chat context one episode (`episode_sample`: a loss mask over its replies
and an advantage per token, whose batches also carry each trained token's turn). `collate` lays a list of them out as tensors with every response ending at
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
number of copies. Distinct prompts that open alike (the system prompt and the task, in every
step of a window-context batch) share that opening too: it runs once, as a one-row pass whose
cache is copied to the distinct prompts before they run on it, so a batch with no repeated prompt
still saves the opening's work on every row but one (the warm-up's batches: about a quarter of their
tokens on KeyDoor). It needs a model that takes `past_key_values` in training, so the learner
turns it off under gradient checkpointing and under torchrun.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from agents.backend import shared_opening
from algos import lm_head


@dataclass(frozen=True)
class Sample:
    """One training sequence: an env step (window context), or a whole episode (chat context), whose
    `response_ids` are every reply and observation turn after the first prompt, with `mask` 1 on the
    sampled reply tokens only and one advantage per token (each reply its step's)."""

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float | list[float]  # one for the whole response, or one per response token
    old_logprobs: list[float]
    is_weights: list[float] | None = None  # rollout-correction weights per token (None = 1)
    mask: list[int] | None = None  # response tokens trained on (None: all of them)

    @property
    def trained_tokens(self) -> int:
        return len(self.response_ids) if self.mask is None else sum(self.mask)

    @property
    def turns(self) -> int:
        """Replies in the response: 1, or an episode's runs of trained tokens (the learner's "sequences")."""
        if self.mask is None:
            return 1 if self.response_ids else 0
        return sum(m and not prev for prev, m in zip([0, *self.mask], self.mask))


def episode_sample(steps: list, advantages: list[float], trained: list[bool] | None = None) -> Sample:
    """One trajectory of the chat context as one sequence: its first prompt, then each reply (trained on,
    at that step's advantage and rollout logprobs; with `trained`, only the replies it marks) and the
    observation turn that followed it (context only). Each step's prompt must extend the previous step's
    prompt and reply exactly: a conversation is never re-tokenized (agents/chat.py), so anything else
    is a bug, raised here."""
    prompt = list(steps[0].prompt_ids)
    ids: list[int] = []
    adv: list[float] = []
    old: list[float] = []
    mask: list[int] = []
    for k, (step, a) in enumerate(zip(steps, advantages, strict=True)):
        sofar = prompt + ids
        if step.prompt_ids[: len(sofar)] != sofar:
            raise RuntimeError(f"trajectory {step.traj_id}: step {k}'s prompt does not extend the conversation "
                               "before it (token drift)")  # fmt: skip
        turn = step.prompt_ids[len(sofar) :]  # the observation turn before this reply (none for the first)
        n = len(step.response_ids)
        ids += turn + list(step.response_ids)
        mask += [0] * len(turn) + [int(trained is None or trained[k])] * n
        adv += [0.0] * len(turn) + [float(a)] * n
        old += [0.0] * len(turn) + list(step.rollout_logprobs)
    return Sample(prompt, ids, adv, old, mask=mask)


def training_samples(trajs: list, adv, mine: set[int], chat: bool) -> list[Sample]:
    """The samples of the trajectories whose group is in `mine`, `adv` holding one advantage per step of
    all of them in order: one sample per step (window context), or per trajectory (chat context)."""
    out: list[Sample] = []
    start = 0
    for traj in trajs:
        end = start + len(traj.steps)
        if traj.group_id in mine and traj.steps:
            advantages = [float(a) for a in adv[start:end]]
            if chat:
                out.append(episode_sample(traj.steps, advantages))
            else:
                out += [Sample(s.prompt_ids, s.response_ids, a, s.rollout_logprobs) for s, a in zip(traj.steps, advantages)]
        start = end
    return out


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
    and a repeated prompt or an opening shared by the distinct prompts, the layout is opening (that
    opening, one row; absent if none) + prefix (distinct prompts minus their last token, after the
    opening) + suffix (last prompt token + response minus its last token) instead of ids/attn."""
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
    if any(s.mask is not None for s in samples):  # episodes: a loss mask, an advantage and a turn per token
        adv = torch.zeros((len(samples), resp))
        turn = torch.full((len(samples), resp), -1, dtype=torch.long)
        turns = 0
        for row, s in enumerate(samples):
            n = len(s.response_ids)
            if not n:
                continue
            values = s.advantage if isinstance(s.advantage, list) else [s.advantage] * n
            adv[row, resp - n :] = torch.tensor(values, dtype=torch.float)
            keep = s.mask if s.mask is not None else [1] * n
            mask[row, resp - n :] *= torch.tensor(keep, dtype=torch.float)
            for j, m in enumerate(keep):
                if m:
                    turns += j == 0 or not keep[j - 1]
                    turn[row, resp - n + j] = turns - 1
        batch = dict(targets=targets, mask=mask, old=old, adv=adv, w=weights, turn=turn)
    else:
        adv = torch.tensor([s.advantage for s in samples], dtype=torch.float)
        batch = dict(targets=targets, mask=mask, old=old, adv=adv, w=weights)
    distinct: dict[tuple[int, ...], int] = {}
    if share_prompts and all(len(s.prompt_ids) >= 2 for s in samples):
        index = [distinct.setdefault(tuple(s.prompt_ids[:-1]), len(distinct)) for s in samples]
    opening = shared_opening(list(distinct)) if len(distinct) >= 2 else 0
    if distinct and (len(distinct) < len(samples) or opening):
        if opening:  # the tokens every distinct prompt opens with: one row, run once
            batch["opening_ids"] = torch.tensor([next(iter(distinct))[:opening]])
        rests = [list(p[opening:]) for p in distinct]
        batch["prefix_ids"], batch["prefix_attn"] = _left_pad(rests, max(map(len, rests)), pad_id)
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
    # Episodes: only the response columns where some row has a trained token go through the head (an
    # episode's observation turns are context); the others come back as 0, which the mask drops.
    cols = batch["mask"].any(0).nonzero()[:, 0] if "turn" in batch else None
    if cols is not None and len(cols) == resp:
        cols = None
    targets = batch["targets"] if cols is None else batch["targets"][:, cols]

    def head(targets, temperature=1.0):  # the chunked head for one forward, or the model's own
        if not chunked:
            return contextlib.nullcontext()
        return lm_head.scoring(model, targets, temperature, vocab, with_entropy, entropy_grad)

    if "prefix_ids" in batch:  # shared prompts: the distinct prefixes once, then each suffix on their cache
        # The passes before the suffix are for their KV cache: their LM head output is never used (skipped where chunked).
        prefix_attn, cache = batch["prefix_attn"], None
        if "opening_ids" in batch:  # the opening all distinct prompts share: once, then copied to each
            opening_ids = batch["opening_ids"]  # [1, K]
            with head(None):
                cache = model(input_ids=opening_ids, attention_mask=torch.ones_like(opening_ids),
                              position_ids=torch.arange(opening_ids.shape[1], device=opening_ids.device)[None],
                              use_cache=True, logits_to_keep=1).past_key_values  # fmt: skip
            cache.reorder_cache(opening_ids.new_zeros(prefix_attn.shape[0]))  # [1, ...] -> [U, ...], differentiable
            prefix_attn = torch.cat([torch.ones_like(opening_ids).expand(prefix_attn.shape[0], -1), prefix_attn], 1)
        width = batch["prefix_ids"].shape[1]
        with head(None):
            cache = model(input_ids=batch["prefix_ids"], attention_mask=prefix_attn,
                          position_ids=(prefix_attn.cumsum(-1) - 1).clamp(min=0)[:, -width:], past_key_values=cache,
                          use_cache=True, logits_to_keep=1).past_key_values  # fmt: skip
        cache.reorder_cache(batch["index"])  # [U, ...] -> [B, ...], differentiable
        attn = torch.cat([prefix_attn[batch["index"]], batch["suffix_attn"]], 1)  # [B, K + P + R]
        with head(targets, temperature):
            out = model(input_ids=batch["suffix_ids"], attention_mask=attn,
                        position_ids=(attn.cumsum(-1) - 1).clamp(min=0)[:, -resp:], past_key_values=cache,
                        use_cache=True, **({} if cols is None else {"logits_to_keep": cols}))  # fmt: skip
        scored = out.logits  # [B, R or len(cols), ...]: column j predicts target j
    else:
        positions = (batch["attn"].cumsum(-1) - 1).clamp(min=0)
        width = batch["ids"].shape[1]
        # Only the positions that predict a response token go through the head (not the prompt's).
        keep = torch.arange(width - resp - 1, width - 1, device=batch["ids"].device)
        keep = keep if cols is None else keep[cols]
        with head(targets, temperature):
            out = model(input_ids=batch["ids"], attention_mask=batch["attn"], position_ids=positions,
                        logits_to_keep=keep)  # fmt: skip
        scored = out.logits  # [B, R, ...]
    if chunked:
        logp, entropy = scored[..., 0], scored[..., 1] if with_entropy else None
    else:
        logp_all = torch.log_softmax(scored[..., :vocab].float() / temperature, -1)  # [B, R, V]
        logp = logp_all.gather(-1, targets[..., None])[..., 0]
        entropy = None
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                entropy = -(logp_all.exp() * logp_all).sum(-1)
    if cols is not None:  # back to every response column
        logp = _spread(logp, cols, resp)
        entropy = _spread(entropy, cols, resp) if entropy is not None else None
    return logp, entropy


def _spread(values: torch.Tensor, cols: torch.Tensor, width: int) -> torch.Tensor:
    """[B, K] values of columns `cols` as [B, width], 0 elsewhere (differentiable)."""
    return values.new_zeros(values.shape[0], width).index_copy(1, cols, values)
