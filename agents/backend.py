"""Generation backends: prompt token ids in, sampled token ids and their logprobs out.

Every backend follows one protocol, `Backend` below (docs/design.md, Backend):

    generate(prompt_token_ids, sampling) -> (response_token_ids, response_logprobs)

Token ids are returned exactly as sampled (token-in/token-out), so the learner trains on
the ids the policy produced, never on a re-tokenized string. Logprobs are those of the
temperature-scaled distribution, log softmax(logits / T), before top-p truncation: the
learner computes the same quantity, so with this backend the ratio starts at exactly 1.

`HFBackend` is the default and the reference: a plain sampling loop over a Hugging Face
causal LM with left padding and a KV cache, batched in chunks of similar prompt length.
Real checkpoints pad their embedding matrix beyond the tokenizer (Qwen2.5: 151,936 rows for
151,665 tokens); those rows are no tokens, so both backends sample from the first
`vocab = len(tokenizer)` logits only, and the learner scores the same truncated distribution
(algos/logprobs.py), so the first PPO ratio stays 1.
`agents.vllm_backend.VLLMBackend` serves the same protocol from a vLLM engine. Both have
`sync(model)` (after a policy update: make generation use the new weights) and `release()`
(before the update: free what generation holds). For this backend `release` is a no-op, and so
is `sync` when it samples from the trained model itself; under FSDP it samples from a full copy
that `sync` refreshes from the gathered weights.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from agents.generation import Sampling
from agents.model import autocast
from agents.weights import full_state_dict, merged_state_dict


@runtime_checkable
class Backend(Protocol):
    """What the agent, the trainer and the weight-sync check call on a generation backend
    (docs/design.md, Backend). `HFBackend` and `agents.vllm_backend.VLLMBackend` implement it.

    A backend may also have `generator`, a torch.Generator its sampling draws from: checkpoints
    then save and restore its state (algos/checkpoint.py). HFBackend has one; vLLM's sampler state
    lives in the engine, so a resumed vLLM run is not bitwise the same."""

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> tuple[list[list[int]], list[list[float]]]:
        """Sample one response per prompt (B prompts of token ids, any lengths).

        Returns (response ids, logprobs), both B lists in the prompts' order: row i holds the
        token ids sampled for prompt i exactly as generated (at most `sampling.max_new_tokens`,
        up to and including the first EOS id, which is kept), and one float per token, its
        logprob under log softmax(logits / T) (T = 1 when greedy) over the ids a sample may take
        (the first `vocab` logits when the backend is given one); with top_p < 1, HFBackend takes
        it before the nucleus truncation and VLLMBackend after. An empty batch gives ([], [])."""

    def sync(self, model) -> None:
        """After a policy update: make the next `generate` sample from `model`'s current weights
        (`model` is the trained module: plain, DDP-wrapped, FSDP-sharded or LoRA)."""

    def release(self) -> None:
        """Before a policy update: free what generation holds (vLLM sleep mode); `sync` or the next
        `generate` takes it back."""

    def close(self) -> None:
        """At the end of a run: shut down what the backend started (under torchrun, before the
        process group is destroyed)."""


class HFBackend:
    """Batched sampling with a KV cache over a `transformers` causal LM."""

    def __init__(self, model, eos_ids: list[int], pad_id: int, batch_size: int = 64, seed: int = 0,
                 precision: str = "off", vocab: int = 0, reuse_prefixes: bool = False,
                 share_opening: bool = True):  # fmt: skip
        """`reuse_prefixes` (the chat context): keep each prompt's KV cache, with its reply, from one
        `generate` to the next, so that a prompt extending a kept one runs only its new tokens
        (`prefill`); dropped when the weights change (`release`, `sync`). `share_opening`: the
        opening a batch's distinct prompts share (system prompt, task) runs once (`prefill`)."""
        self.model, self.precision = model, precision
        self.reuse_prefixes, self.share_opening = reuse_prefixes, share_opening
        self.kept: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}  # tokens -> per-layer K, V
        self.vocab = vocab or None  # tokens a sample may take: ids >= len(tokenizer) are padded rows
        self.eos_ids = torch.tensor(sorted(set(eos_ids)))
        self.pad_id = pad_id
        self.batch_size = batch_size
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def sync(self, model) -> None:
        """Nothing to do when this backend samples from the trained model itself; otherwise copy its
        weights into the sampling copy: an FSDP-sharded model's gathered full weights, or a LoRA
        model's with the adapter merged in when the copy is a plain model (one matmul per layer
        while sampling, not three: algos/policy.py)."""
        self.kept = {}  # computed with the old weights
        if model is self.model or getattr(model, "module", None) is self.model:
            return
        weights = full_state_dict(model)
        if not hasattr(self.model, "peft_config"):
            weights = merged_state_dict(weights, getattr(model, "module", model))  # plain models pass through
        self.model.load_state_dict(weights)

    def release(self) -> None:
        """Before an update: the kept prefixes' KV caches go (the weights are about to change in place)."""
        self.kept = {}

    def close(self) -> None:
        """Nothing to shut down."""

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], sampling: Sampling) -> tuple[list[list[int]], list[list[float]]]:
        ids: list[list[int]] = [[] for _ in prompts]
        logps: list[list[float]] = [[] for _ in prompts]
        was_training = self.model.training
        self.model.eval()
        kept: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for chunk in self.batches(prompts):
            with autocast(self.device, self.precision):  # as the learner computes them
                out_ids, out_lp = self._generate_batch([prompts[i] for i in chunk], sampling, kept)
            for i, r, lp in zip(chunk, out_ids, out_lp):
                ids[i], logps[i] = r, lp
        self.kept = kept  # this call's conversations, each at its newest turn
        self.model.train(was_training)
        return ids, logps

    def _generate_batch(self, prompts: list[list[int]], sampling: Sampling, kept: dict):
        batch = len(prompts)
        hits = [self._kept_prefix(p) for p in prompts] if self.reuse_prefixes and self.kept else []
        if any(hits):
            logits, cache, mask, step_pos = self.prefill_from(prompts, hits)
        else:
            logits, cache, mask, step_pos = self.prefill(prompts)
        width = mask.shape[1]  # the prompt part of the mask; decoded tokens come after it
        eos = self.eos_ids.to(self.device)
        done = torch.zeros(batch, dtype=torch.bool, device=self.device)
        tokens, logprobs = [], []
        for n in range(sampling.max_new_tokens):
            token, logprob = sample(logits, sampling, self.generator)
            token = torch.where(done, self.pad_id, token)  # finished rows idle on padding
            tokens.append(torch.where(done, -1, token))  # -1 marks "already finished"
            logprobs.append(logprob)
            done = done | torch.isin(token, eos)
            if bool(done.all()) or n == sampling.max_new_tokens - 1:
                break
            logits, cache, mask, step_pos = self.decode(token, cache, mask, step_pos)
        tok = torch.stack(tokens, 1).tolist()  # [B, T]
        lp = torch.stack(logprobs, 1).tolist()
        out_ids, out_lp = [], []
        for row in range(batch):
            n = next((j for j, t in enumerate(tok[row]) if t == -1), len(tok[row]))
            out_ids.append(tok[row][:n])
            out_lp.append(lp[row][:n])
        if self.reuse_prefixes:
            self._keep(prompts, out_ids, cache, mask, width, kept)
        return out_ids, out_lp

    def _kept_prefix(self, prompt: list[int]) -> tuple[int, ...] | None:
        """The longest kept token sequence that `prompt` extends (strictly), or None."""
        best, prompt = None, tuple(prompt)  # compared as tuples: no list made per key
        for key in self.kept:
            if len(key) < len(prompt) and (best is None or len(key) > len(best)) and prompt[: len(key)] == key:
                best = key
        return best

    def _keep(self, prompts, responses, cache, mask: torch.Tensor, width: int, kept: dict) -> None:
        """Each row's KV cache over its prompt and the reply tokens that went through the model (all but
        the last sampled one, or all of them when the row finished before the others), without padding."""
        if not plain_layers(cache):
            self.reuse_prefixes = False  # sliding-window or hybrid caches: not reused
            return
        decoded = mask.shape[1] - width  # decode steps run: the tokens fed after the prompts
        for row, (prompt, response) in enumerate(zip(prompts, responses)):
            fed = min(len(response), decoded)
            cols = torch.cat([mask[row, :width].nonzero()[:, 0], torch.arange(width, width + fed, device=mask.device)])
            kept[tuple(prompt) + tuple(response[:fed])] = [(layer.keys[row][:, cols], layer.values[row][:, cols])
                                                           for layer in cache.layers]  # fmt: skip

    def prefill_from(self, prompts: list[list[int]], hits: list[tuple[int, ...] | None]):
        """`prefill` for prompts that extend kept ones: the kept KV rows, right-aligned (padding before
        them), then only each prompt's new tokens through the model, left-padded after them."""
        lengths = [len(h) if h else 0 for h in hits]
        past = max(lengths)
        first = next(self.kept[h] for h in hits if h)  # shapes (and dtype) of every kept layer
        sample_k, sample_v = first[0]
        keys, values = [], []
        for layer in range(len(first)):
            k = sample_k.new_zeros((len(prompts), sample_k.shape[0], past, sample_k.shape[2]))
            v = sample_v.new_zeros((len(prompts), sample_v.shape[0], past, sample_v.shape[2]))
            for row, h in enumerate(hits):
                if h:
                    k[row, :, past - lengths[row] :], v[row, :, past - lengths[row] :] = self.kept[h][layer]
            keys.append(k)
            values.append(v)
        past_mask = torch.zeros((len(prompts), past), dtype=torch.long, device=self.device)
        for row, n in enumerate(lengths):
            past_mask[row, past - n :] = 1
        suffix_ids, suffix_mask, _ = left_pad([p[n:] for p, n in zip(prompts, lengths)], self.pad_id, self.device)
        positions = (suffix_mask.cumsum(-1) - 1).clamp(min=0) + torch.tensor(lengths, device=self.device)[:, None]
        mask = torch.cat([past_mask, suffix_mask], 1)
        from transformers import DynamicCache

        cache = DynamicCache(ddp_cache_data=list(zip(keys, values)))
        out = self.model(input_ids=suffix_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                         use_cache=True, logits_to_keep=1)  # fmt: skip
        return out.logits[:, -1, : self.vocab].float(), out.past_key_values, mask, positions[:, -1:]

    def batches(self, prompts: list[list[int]]) -> list[list[int]]:
        """Indices of the prompts in generation batches: by length (little padding), `batch_size` each."""
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        return [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]

    def decode(self, token: torch.Tensor, cache, mask: torch.Tensor, positions: torch.Tensor):
        """One cached forward for the tokens [B] just sampled: (next-token logits [B, V], cache, mask
        [B, T + 1], positions [B, 1])."""
        positions = positions + 1
        mask = torch.cat([mask, torch.ones((len(token), 1), dtype=mask.dtype, device=mask.device)], 1)
        out = self.model(input_ids=token[:, None], attention_mask=mask, position_ids=positions, past_key_values=cache,
                         use_cache=True)  # fmt: skip
        return out.logits[:, -1, : self.vocab].float(), out.past_key_values, mask, positions

    def prefill(self, prompts: list[list[int]]):
        """The prompts' forward pass: (next-token logits [B, V], KV cache, attention mask [B, T], last
        positions [B, 1]). Equal prompts (a group's first step; rollouts that reach the same state with
        the same memory) run once and their cache rows are copied, and only the last position goes
        through the LM head. With `share_opening`, the opening the distinct prompts share runs once
        as one row, whose cache is copied to each before the rest of each prompt runs on it (the
        layout algos/logprobs.py trains on: opening, then each rest left-padded)."""
        unique: dict[tuple[int, ...], int] = {}
        rows = [unique.setdefault(tuple(p), len(unique)) for p in prompts]
        opening = shared_opening(list(unique)) if self.share_opening and len(unique) >= 2 else 0
        cache = self._opening_cache(next(iter(unique))[:opening], len(unique)) if opening else None
        if cache is None:
            opening = 0
        input_ids, mask, positions = left_pad([list(p[opening:]) for p in unique], self.pad_id, self.device)
        if opening:
            mask = torch.cat([torch.ones((len(unique), opening), dtype=mask.dtype, device=self.device), mask], 1)
            positions = positions + opening
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                         use_cache=True, logits_to_keep=1)  # fmt: skip
        cache, logits = out.past_key_values, out.logits[:, -1, : self.vocab].float()
        if len(unique) < len(prompts):
            index = torch.tensor(rows, device=self.device)
            cache.reorder_cache(index)  # rows of the unique prompts -> rows of the batch
            logits, mask, positions = logits[index], mask[index], positions[index]
        return logits, cache, mask, positions[:, -1:]

    def _opening_cache(self, opening: tuple[int, ...], rows: int):
        """The KV cache of `opening` run once, copied to `rows` rows; None for caches that are not
        plain per-layer K, V (sliding-window or hybrid layers), whose prompts then run whole, and
        sharing stops."""
        ids = torch.tensor([opening], device=self.device)
        cache = self.model(input_ids=ids, position_ids=torch.arange(len(opening), device=self.device)[None],
                           use_cache=True, logits_to_keep=1).past_key_values  # fmt: skip
        if not plain_layers(cache):
            self.share_opening = False  # not again: every later opening pass would be thrown away too
            return None
        cache.reorder_cache(torch.zeros(rows, dtype=torch.long, device=self.device))  # [1, ...] -> [rows, ...]
        return cache


def plain_layers(cache) -> bool:
    """Whether every layer of a KV cache holds plain per-layer K, V (not sliding-window or hybrid)."""
    return all(type(layer).__name__ == "DynamicLayer" for layer in cache.layers)


def shared_opening(prompts: list[tuple[int, ...]]) -> int:
    """How many opening tokens all `prompts` share, leaving each at least one of its own (so that every
    row of the pass after the opening has a token to run)."""
    shared = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for p in prompts[1:]:
        shared = next((i for i in range(shared) if p[i] != first[i]), shared)
    return max(shared, 0)


def left_pad(prompts: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, position ids) [B, T], left-padded so every prompt ends at column -1;
    positions count real tokens from 0, so padding never shifts them."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def sample(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from [B, V] logits; returns (token [B], logprob [B]), the logprob of
    log softmax(logits / T) before top-p truncation. The logits are overwritten (they are the
    backend's own buffer: working in place saves a [B, V] allocation per step, which at a real
    vocabulary costs more than the arithmetic).

    Sampling is by inverse CDF, exact at any vocabulary size: one uniform u per row, and the
    token is the first whose running probability mass exceeds u, found block by block in float64
    (draw). A token of probability 0 (outside the nucleus, or underflowed) adds no mass, so it can
    never be drawn, whatever u is; the exponential race argmax p / E this replaces drew arbitrary
    tokens when torch.rand returned exactly 0 (E = 0: p / E = inf or NaN), 1 in 2^24 draws per
    vocabulary entry, which at V = 151,936 is about 1 % of all sampled tokens."""
    if sampling.temperature <= 0:  # greedy; the logprob at T = 1 (Sampling.score_temperature): -log sum exp(z - max z)
        token = argmax(logits)
        weights = logits.sub_(logits.gather(-1, token[:, None])).exp_()
        return token, -block_sums(weights).sum(-1).log().float()
    if sampling.temperature != 1.0:
        logits.div_(sampling.temperature)
    weights = logits.sub_(logits.amax(-1, keepdim=True)).exp_()  # [B, V] exp(z - max z): the top token is 1
    sums = block_sums(weights)  # [B, blocks] float64
    total = sums.sum(-1)  # the logprob's normaliser, before top-p
    if sampling.top_p < 1.0:
        keep_nucleus(weights, total, sampling.top_p)
        sums = block_sums(weights)
    u = torch.rand(len(weights), generator=generator, device=weights.device, dtype=torch.float64)
    token = draw(weights, sums, u)
    return token, (weights.gather(-1, token[:, None])[:, 0].double().log() - total.log()).float()


BLOCK = 256  # draw's block size: [B, V / 256] running sums, then one block of 256 per row


def per_block(x: torch.Tensor, reduce) -> torch.Tensor:
    """[B, V] -> [B, ceil(V / BLOCK)]: `reduce` (torch.sum, torch.amax) over consecutive blocks of
    BLOCK entries, the last one possibly short."""
    rows, vocab = x.shape
    full = vocab // BLOCK * BLOCK
    out = reduce(x[:, :full].reshape(rows, -1, BLOCK), -1)  # a view: no copy of [B, V]
    if full < vocab:
        out = torch.cat([out, reduce(x[:, full:], -1, keepdim=True)], 1)
    return out


def block_sums(weights: torch.Tensor) -> torch.Tensor:
    """[B, V] nonnegative weights -> [B, ceil(V / BLOCK)] float64 sums of consecutive blocks."""
    return per_block(weights, torch.sum).double()


def one_block(x: torch.Tensor, block: torch.Tensor, fill: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row the entries of block `block` [B]: (offsets [BLOCK], values [B, BLOCK]), `fill` past the end."""
    offsets = torch.arange(BLOCK, device=x.device)
    index = block[:, None] * BLOCK + offsets
    values = x.gather(-1, index.clamp(max=x.shape[1] - 1))
    return offsets, values.masked_fill(index >= x.shape[1], fill)


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """First index of the row maximum [B], through block maxima (torch's argmax is not vectorised on
    CPU: over 151,665 columns it takes 8x the time of amax)."""
    block = per_block(logits, torch.amax).argmax(-1)  # the first block holding the maximum
    _, values = one_block(logits, block, float("-inf"))
    return block * BLOCK + values.argmax(-1)


def draw(weights: torch.Tensor, sums: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: per row the first index whose running sum of `weights` [B, V] exceeds
    u * total, for u [B] in [0, 1); `sums` are block_sums(weights). An index of weight 0 is never
    returned: it adds nothing to the running sum, and where rounding puts the target past a
    block's last entry, the block's last positive entry is taken."""
    cum = sums.cumsum(-1)  # [B, blocks]
    target = u * cum[:, -1]
    block = torch.searchsorted(cum, target[:, None], right=True)[:, 0].clamp(max=cum.shape[1] - 1)
    before = torch.where(block > 0, cum.gather(-1, (block - 1).clamp(min=0)[:, None])[:, 0], 0.0)
    offsets, w = one_block(weights, block, 0.0)  # [B, BLOCK] the chosen block's entries
    running = w.double().cumsum(-1)
    pos = (running <= (target - before)[:, None]).sum(-1)  # first entry whose running sum exceeds the target
    last_positive = torch.where(w > 0, offsets, -1).amax(-1)
    return block * BLOCK + torch.minimum(pos, last_positive)


def keep_nucleus(weights: torch.Tensor, total: torch.Tensor, top_p: float) -> None:
    """Zero, in place, every weight outside the smallest set of largest weights whose mass reaches
    top_p * total (always at least one). The candidates come from topk, widened until they hold
    that mass, so a peaked distribution never sorts the whole vocabulary."""
    vocab = weights.shape[1]
    k = min(vocab, 1024)
    while True:
        top, idx = weights.topk(k, -1)  # [B, k] descending
        mass = top.double().cumsum(-1)
        if k == vocab or bool((mass[:, -1] >= top_p * total).all()):
            break
        k = min(vocab, 8 * k)
    keep = (mass - top) < (top_p * total)[:, None]  # the mass before it has not reached top_p yet
    mask = torch.zeros_like(weights, dtype=torch.bool).scatter_(-1, idx, keep)
    weights.masked_fill_(~mask, 0.0)
