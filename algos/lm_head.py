"""The LM head of the update, chunk by chunk: token logprobs without [tokens x vocab] in memory.

A real checkpoint's head is a [151,936 x H] matrix. The plain way to score response tokens,
log_softmax(model(...).logits / T).gather(targets), materialises float32 logits, their copy
divided by T and the log-softmax for every response token of a micro-batch, and autograd keeps
the softmax for the backward: at micro-batch 64 x 16 tokens that is 0.6 GB per copy.

`head_logprobs` computes the same numbers from the final hidden states and the head's weight in
chunks of about CHUNK_ELEMENTS logits: the forward keeps only each token's logprob, entropy and
log-normaliser; the backward recomputes each chunk's logits and turns them into gradients at
once (d logp / dz = onehot - p; d entropy / dz = -p (log p + H)), so memory holds one chunk of
logits, never the batch's. The price is one more head matmul in the backward (the recompute).

`scoring(model, ...)` makes a Hugging Face causal LM use it: during one forward the head
module's `forward` is replaced, so the model (plain, LoRA, DDP or FSDP2: their hooks still run
around the head) returns [B, R, 2] (logprob, entropy) where it would return logits. It applies
where the head is a bias-free `nn.Linear` and the model changes nothing after it (no logit
soft-capping or scaling); `applies(model)` says when, and algos/logprobs.py falls back to plain
logits otherwise. Only the first `vocab` rows are scored: rows beyond the tokenizer are padding
and both generation backends never sample them (agents/backend.py).
"""

from __future__ import annotations

import contextlib

import torch

CHUNK_ELEMENTS = 1 << 23  # logits per chunk: 32 MB in float32; 55 tokens at V = 151,936
POST_HEAD_SETTINGS = ("final_logit_softcapping", "logit_scale", "logits_scaling")  # configs that rescale logits


def output_layer(model):
    """The LM head of a causal LM, through DDP (`.module`) and peft wrappers."""
    return getattr(model, "module", model).get_output_embeddings()


def applies(model) -> bool:
    """Whether `scoring` computes exactly what the model's own logits would give."""
    head = output_layer(model)
    config = getattr(model, "module", model).config
    plain = type(head) is torch.nn.Linear and head.bias is None
    return plain and all(getattr(config, k, None) in (None, 1, 1.0) for k in POST_HEAD_SETTINGS)


@contextlib.contextmanager
def scoring(model, targets: torch.Tensor | None, temperature: float, vocab: int | None, with_entropy: bool,
            entropy_grad: bool):  # fmt: skip
    """During the block, the head maps hidden [B, R, H] to (logprob, entropy) [B, R, 2] of `targets`
    [B, R] under softmax(logits[:vocab] / T); with `targets=None` it skips the head (returns [B, R, 0])."""
    head = output_layer(model)

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        if targets is None:
            return hidden[..., :0]
        rows, width = targets.shape
        logp, entropy = head_logprobs(hidden.reshape(rows * width, -1), head.weight, targets.reshape(-1),
                                      temperature, vocab, with_entropy, entropy_grad)  # fmt: skip
        return torch.stack([logp, entropy], -1).reshape(rows, width, 2)

    previous = head.__dict__.get("forward")  # accelerate's device hooks, for one, set an instance forward
    head.forward = forward  # an instance attribute: nn.Module.__call__ (and every hook) still runs
    try:
        yield
    finally:
        if previous is None:
            del head.forward
        else:
            head.forward = previous


def head_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                  vocab: int | None = None, with_entropy: bool = False, entropy_grad: bool = False):  # fmt: skip
    """(logprob [N], entropy [N]) of `targets` [N] under softmax(hidden [N, H] @ weight[:vocab].T / T),
    float32; the entropy is zeros unless asked for, and differentiable only with `entropy_grad`."""
    vocab = min(vocab or weight.shape[0], weight.shape[0])
    kind = hidden.device.type
    dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else weight.dtype
    return _HeadLogprobs.apply(hidden, weight, targets, float(temperature), vocab, with_entropy, entropy_grad, dtype)


class _HeadLogprobs(torch.autograd.Function):
    """Two [chunk, vocab] float32 buffers serve every chunk of a call, forward and backward: on CPU a
    fresh tensor of that size is a fresh mmap whose page faults cost more than the softmax itself.
    The temperature scales the hidden states ([n, H]) instead of the logits ([n, V])."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, vocab, with_entropy, entropy_grad, dtype):
        w = weight[:vocab].to(dtype)
        n = hidden.shape[0]
        step = min(n, max(1, CHUNK_ELEMENTS // vocab))
        logp = torch.empty(n, device=hidden.device)
        entropy = torch.zeros(n, device=hidden.device)
        lse = torch.empty(n, device=hidden.device)
        z_buf, lp_buf = (torch.empty(step, vocab, device=hidden.device) for _ in range(2))
        with torch.autocast(hidden.device.type, enabled=False):
            for s in range(0, n, step):
                rows = slice(s, s + step)
                z = _logits(hidden[rows] / temperature, w, z_buf)  # [r, vocab] z = h W^T / T
                target_z = z.gather(-1, targets[rows, None])[:, 0]
                lp = torch.log_softmax(z, -1, out=lp_buf[: len(z)])
                logp[rows] = lp.gather(-1, targets[rows, None])[:, 0]
                lse[rows] = target_z - logp[rows]  # log sum exp z, for the backward
                if with_entropy:  # H = -sum p log p, written over z (torch's pairwise sum: float32 is exact enough)
                    entropy[rows] = -torch.exp(lp, out=z).mul_(lp).sum(-1)
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.settings = (temperature, vocab, dtype, step, entropy_grad)
        if not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        temperature, vocab, dtype, step, entropy_grad = ctx.settings
        w = weight[:vocab].to(dtype)
        need_hidden, need_weight = ctx.needs_input_grad[:2]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = torch.zeros(weight.shape, device=weight.device) if need_weight else None
        use_entropy = entropy_grad and grad_entropy is not None
        z_buf, p_buf = (torch.empty(step, vocab, device=hidden.device) for _ in range(2))
        with torch.autocast(hidden.device.type, enabled=False):
            for s in range(0, hidden.shape[0], step):
                rows = slice(s, s + step)
                scaled = hidden[rows] / temperature
                z = _logits(scaled, w, z_buf)
                p = torch.softmax(z, -1, out=p_buf[: len(z)])
                g = grad_logp[rows, None]
                # d logp_target / dz = onehot - p;  d H / dz = -p (log p + H), log p = z - lse
                if use_entropy:
                    a = grad_entropy[rows, None]
                    gz = p.mul_(z.mul_(-a).sub_(g + a * (entropy[rows, None] - lse[rows, None])))
                else:
                    gz = p.mul_(-g)
                gz.scatter_add_(-1, targets[rows, None], g)
                if need_hidden:
                    grad_hidden[rows] = (gz.to(dtype) @ w).to(hidden.dtype) / temperature
                if need_weight:
                    grad_weight[:vocab].addmm_(gz.T, scaled.float())
        if need_weight:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None, None


def _logits(scaled: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """scaled [r, H] @ w.T into the float32 buffer `out` (its first r rows), in the compute dtype."""
    out = out[: len(scaled)]
    if w.dtype == torch.float32:
        return torch.matmul(scaled.float(), w.T, out=out)
    return out.copy_(scaled.to(w.dtype) @ w.T)
