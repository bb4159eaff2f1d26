"""Generation backends: prompt token ids in, sampled token ids and their logprobs out.

Every backend follows one protocol (DESIGN.md):

    generate(prompt_token_ids, sampling) -> (response_token_ids, response_logprobs)

Token ids are returned exactly as sampled (token-in/token-out), so the learner trains on
the ids the policy produced, never on a re-tokenized string. Logprobs are those of the
temperature-scaled distribution, log softmax(logits / T), before top-p truncation: the
learner computes the same quantity, so with this backend the ratio starts at exactly 1.

`HFBackend` is the default and the reference: a plain sampling loop over a Hugging Face
causal LM with left padding and a KV cache, batched in chunks of similar prompt length.
`agents.vllm_backend.VLLMBackend` serves the same protocol from a vLLM engine. Both have
`sync(model)` (after a policy update: make generation use the new weights) and `release()`
(before the update: free what generation holds). For this backend `release` is a no-op, and so
is `sync` when it samples from the trained model itself; under FSDP it samples from a full copy
that `sync` refreshes from the gathered weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agents.model import autocast


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    max_new_tokens: int = 24


class HFBackend:
    """Batched sampling with a KV cache over a `transformers` causal LM."""

    def __init__(self, model, eos_ids: list[int], pad_id: int, batch_size: int = 64, seed: int = 0,
                 precision: str = "off"):  # fmt: skip
        self.model, self.precision = model, precision
        self.eos_ids = torch.tensor(sorted(set(eos_ids)))
        self.pad_id = pad_id
        self.batch_size = batch_size
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def sync(self, model) -> None:
        """Nothing to do when this backend samples from the trained model itself; otherwise (the
        trained model is FSDP-sharded) copy its gathered full weights into the sampling copy."""
        if model is self.model or getattr(model, "module", None) is self.model:
            return
        from algos.distributed import full_state_dict

        self.model.load_state_dict(full_state_dict(model))

    def release(self) -> None:
        """Nothing to free between rollouts and updates."""

    def close(self) -> None:
        """Nothing to shut down."""

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], sampling: Sampling) -> tuple[list[list[int]], list[list[float]]]:
        ids: list[list[int]] = [[] for _ in prompts]
        logps: list[list[float]] = [[] for _ in prompts]
        was_training = self.model.training
        self.model.eval()
        for chunk in self.batches(prompts):
            with autocast(self.device, self.precision):  # as the learner computes them
                out_ids, out_lp = self._generate_batch([prompts[i] for i in chunk], sampling)
            for i, r, lp in zip(chunk, out_ids, out_lp):
                ids[i], logps[i] = r, lp
        self.model.train(was_training)
        return ids, logps

    def _generate_batch(self, prompts: list[list[int]], sampling: Sampling):
        batch = len(prompts)
        logits, cache, mask, step_pos = self.prefill(prompts)
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
        return out_ids, out_lp

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
        return out.logits[:, -1, :].float(), out.past_key_values, mask, positions

    def prefill(self, prompts: list[list[int]]):
        """The prompts' forward pass: (next-token logits [B, V], KV cache, attention mask [B, T], last
        positions [B, 1]). Equal prompts (a group's first step; rollouts that reach the same state with
        the same memory) run once and their cache rows are copied, and only the last position goes
        through the LM head."""
        unique: dict[tuple[int, ...], int] = {}
        rows = [unique.setdefault(tuple(p), len(unique)) for p in prompts]
        input_ids, mask, positions = left_pad([list(p) for p in unique], self.pad_id, self.device)
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1)  # fmt: skip
        cache, logits = out.past_key_values, out.logits[:, -1, :].float()
        if len(unique) < len(prompts):
            index = torch.tensor(rows, device=self.device)
            cache.reorder_cache(index)  # rows of the unique prompts -> rows of the batch
            logits, mask, positions = logits[index], mask[index], positions[index]
        return logits, cache, mask, positions[:, -1:]


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
    """One token per row from [B, V] logits; returns (token [B], logprob [B])."""
    if sampling.temperature <= 0:
        logp = torch.log_softmax(logits, -1)
        token = logits.argmax(-1)
        return token, logp.gather(-1, token[:, None])[:, 0]
    logp = torch.log_softmax(logits / sampling.temperature, -1)
    probs = logp.exp()
    if sampling.top_p < 1.0:
        sorted_p, idx = probs.sort(-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always at least one token)
        drop = sorted_p.cumsum(-1) - sorted_p >= sampling.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
    # argmax p_i / E_i with E_i ~ Exp(1) is a draw from p (the exponential race, as Gumbel-max; what
    # torch.multinomial does inside). E = -log(1 - U) from uniforms: ~5x faster than exponential_ on CPU.
    race = torch.rand(probs.shape, generator=generator, device=probs.device).neg_().log1p_().neg_()
    token = (probs / race).argmax(-1)
    return token, logp.gather(-1, token[:, None])[:, 0]
