"""The chunked LM head (algos/lm_head.py) against plain float64 autograd: values and gradients of
logprob and entropy, several chunks, padded head rows, temperature; and response_logprobs' chunked
path against its plain full-logits path on the tiny model and on the real-vocabulary profile."""

import copy
import random
import types

import pytest
import torch

from algos import lm_head
from algos.lm_head import applies, head_logprobs
from algos.logprobs import Sample, collate, response_logprobs


def reference(hidden, weight, targets, temperature, vocab):
    """(logp, entropy) in float64 by plain autograd over the full logits of the first `vocab` rows."""
    logp_all = torch.log_softmax((hidden @ weight[:vocab].T) / temperature, -1)
    return logp_all.gather(-1, targets[:, None])[:, 0], -(logp_all.exp() * logp_all).sum(-1)


def inputs(n=7, width=16, rows=60, vocab=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, width, generator=g)
    weight = torch.randn(rows, width, generator=g) * 0.7
    targets = torch.randint(0, vocab, (n,), generator=g)
    up_logp, up_entropy = torch.randn(n, generator=g), torch.randn(n, generator=g)
    return hidden, weight, targets, up_logp, up_entropy


def close(a, b, rtol=1e-5, atol=1e-6):
    assert a.shape == b.shape
    assert torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol), (a - b).abs().max()


@pytest.mark.parametrize("chunk", [lm_head.CHUNK_ELEMENTS, 120, 7])  # one chunk; 2 rows a chunk; 1 row a chunk
@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.6])
@pytest.mark.parametrize("vocab", [50, 60])  # 10 padded rows; all rows scored
def test_head_logprobs_values_and_gradients_match_plain_autograd(monkeypatch, chunk, temperature, vocab):
    monkeypatch.setattr(lm_head, "CHUNK_ELEMENTS", chunk)
    hidden, weight, targets, up_logp, up_entropy = inputs(vocab=vocab)
    h64, w64 = hidden.double().requires_grad_(), weight.double().requires_grad_()
    ref_logp, ref_entropy = reference(h64, w64, targets, temperature, vocab)
    ref_grads = torch.autograd.grad((ref_logp, ref_entropy), (h64, w64), (up_logp.double(), up_entropy.double()))
    ref_grads_logp = torch.autograd.grad(reference(h64, w64, targets, temperature, vocab)[0], (h64, w64),
                                         up_logp.double())  # fmt: skip
    for entropy_grad in (True, False):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        logp, entropy = head_logprobs(h, w, targets, temperature, vocab, True, entropy_grad)
        assert logp.dtype == entropy.dtype == torch.float32
        close(logp, ref_logp)
        close(entropy, ref_entropy)
        if entropy_grad:
            grads = torch.autograd.grad((logp, entropy), (h, w), (up_logp, up_entropy))
            expected = ref_grads
        else:
            assert not entropy.requires_grad  # no gradient through the entropy
            grads = torch.autograd.grad(logp, (h, w), up_logp)
            expected = ref_grads_logp
        close(grads[0], expected[0])
        close(grads[1], expected[1])
        assert torch.count_nonzero(grads[1][vocab:]) == 0  # padded rows: exactly zero
        assert grads[1][:vocab].abs().min() > 0  # every scored row gets some gradient (softmax is dense)


def test_head_logprobs_without_entropy_and_vocab_default(monkeypatch):
    monkeypatch.setattr(lm_head, "CHUNK_ELEMENTS", 200)
    hidden, weight, targets, up_logp, _ = inputs(n=9, rows=40, vocab=40)
    logp, entropy = head_logprobs(hidden, weight, targets)  # vocab None: every row; T = 1
    close(logp, reference(hidden.double(), weight.double(), targets, 1.0, 40)[0])
    assert torch.count_nonzero(entropy) == 0
    h = hidden.clone().requires_grad_()
    (g,) = torch.autograd.grad(head_logprobs(h, weight, targets, 1.3, 1000)[0], h, up_logp)  # vocab > rows: all
    h64 = hidden.double().requires_grad_()
    (expected,) = torch.autograd.grad(reference(h64, weight.double(), targets, 1.3, 40)[0], h64, up_logp.double())
    close(g, expected)


def test_head_logprobs_at_a_real_vocab_size():
    """151,936 rows, 151,665 scored, several tokens a chunk as in training (the default chunk size)."""
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(70, 32, generator=g)  # 70 tokens: two chunks at the default size
    weight = (torch.randn(151_936, 32, generator=g) * 0.2).requires_grad_()
    targets = torch.randint(0, 151_665, (70,), generator=g)
    up = torch.randn(70, generator=g)
    logp, entropy = head_logprobs(hidden, weight, targets, 0.9, 151_665, True, False)
    (grad,) = torch.autograd.grad(logp, weight, up)
    w64 = weight.detach().double().requires_grad_()
    ref_logp, ref_entropy = reference(hidden.double(), w64, targets, 0.9, 151_665)
    (ref_grad,) = torch.autograd.grad(ref_logp, w64, up.double())
    close(logp, ref_logp, rtol=1e-5, atol=1e-5)
    close(entropy, ref_entropy, rtol=1e-5, atol=1e-5)
    close(grad, ref_grad, rtol=1e-4, atol=1e-7)
    assert torch.count_nonzero(grad[151_665:]) == 0


# ----------------------------------------------------------- response_logprobs: chunked vs plain


def samples_for(tokenizer, seed: int, share: bool, n: int = 6) -> list[Sample]:
    """Random prompts and responses; with `share` three of the prompts repeat (as a group's do)."""
    rng = random.Random(seed)
    vocab = len(tokenizer)
    prompts = [[rng.randrange(3, vocab) for _ in range(rng.randint(3, 8))] for _ in range(n)]
    if share:
        prompts[2] = prompts[4] = prompts[0]
        prompts[5] = prompts[1]
    out = []
    for p in prompts:
        r = [rng.randrange(3, vocab) for _ in range(rng.randint(1, 5))]
        out.append(Sample(p, r, rng.uniform(-1, 1), [0.0] * len(r)))
    return out


def run(model, batch, temperature, vocab, entropy_grad):
    """logp, entropy and every parameter's gradient of a random linear function of both."""
    model.zero_grad(set_to_none=True)
    logp, entropy = response_logprobs(model, batch, temperature, True, entropy_grad, vocab)
    g = torch.Generator().manual_seed(7)
    up_logp, up_entropy = torch.randn(logp.shape, generator=g), torch.randn(logp.shape, generator=g)
    loss = (logp * up_logp * batch["mask"]).sum() + (entropy * up_entropy * batch["mask"]).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), entropy.detach(), grads


def chunked_vs_plain(model, tokenizer, monkeypatch, share, vocab, temperature, entropy_grad=True):
    pad = tokenizer.pad_token_id
    samples = samples_for(tokenizer, seed=3, share=share)
    batch = collate(samples, pad, "cpu", share_prompts=share)
    assert ("prefix_ids" in batch) == share  # the shared-prompt layout is what is tested
    assert applies(model)
    chunked = run(copy.deepcopy(model), batch, temperature, vocab, entropy_grad)
    with monkeypatch.context() as m:
        m.setattr(lm_head, "applies", lambda _: False)
        plain = run(copy.deepcopy(model), batch, temperature, vocab, entropy_grad)
    mask = batch["mask"].bool()
    close(chunked[0][mask], plain[0][mask], rtol=1e-5, atol=1e-5)
    close(chunked[1][mask], plain[1][mask], rtol=1e-5, atol=1e-5)
    assert chunked[2].keys() == plain[2].keys() == {n for n, _ in model.named_parameters()}
    for name, g in plain[2].items():
        rel = (chunked[2][name] - g).norm() / g.norm()
        assert g.norm() > 0 and rel < 1e-5, (name, float(rel))
    return batch, samples, chunked, plain


@pytest.mark.parametrize("share", [False, True])
def test_chunked_head_matches_plain_logits_on_the_tiny_model(tiny, monkeypatch, share):
    model, tokenizer = tiny
    chunked_vs_plain(model, tokenizer, monkeypatch, share, vocab=None, temperature=0.8)


@pytest.mark.parametrize("share", [False, True])
def test_chunked_head_matches_plain_logits_on_the_profile(qwen, monkeypatch, share):
    """Real vocabulary, 271 padded rows, tied embeddings: the tied matrix's gradient sums its use as
    the embedding (prompt and response rows) and as the head (every scored row)."""
    model, tokenizer = qwen
    vocab = len(tokenizer)
    batch, samples, chunked, plain = chunked_vs_plain(model, tokenizer, monkeypatch, share, vocab, 1.0)
    names = {n for n, _ in model.named_parameters()}
    assert "lm_head.weight" not in names  # tied: one parameter serves both
    grad = chunked[2]["model.embed_tokens.weight"]
    assert torch.count_nonzero(grad[vocab:]) == 0  # padded rows: never input, never scored
    used = sorted({t for s in samples for t in s.prompt_ids + s.response_ids})
    unused = torch.ones(grad.shape[0], dtype=torch.bool)
    unused[used] = False
    unused[vocab:] = False
    assert bool((grad[unused].abs().sum(-1) > 0).all())  # the head's gradient reaches every scored row
    # the embedding use adds to the used rows: without it (head only) their gradient would differ
    head_only = copy.deepcopy(model)
    head_only.model.embed_tokens.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    head_only.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    head_only.config.tie_word_embeddings = False
    assert applies(head_only)
    _, _, untied = run(head_only, batch, 1.0, vocab, True)
    summed = untied["model.embed_tokens.weight"] + untied["lm_head.weight"]
    assert (grad - summed).norm() / summed.norm() < 1e-5
    assert untied["model.embed_tokens.weight"][used].abs().sum() > 0


def test_entropy_grad_off_leaves_the_logprob_gradient_alone(qwen, monkeypatch):
    model, tokenizer = qwen
    chunked_vs_plain(model, tokenizer, monkeypatch, True, len(tokenizer), 0.7, entropy_grad=False)


def test_applies_only_to_a_plain_bias_free_head(tiny):
    model, _ = tiny
    assert applies(model)
    assert applies(types.SimpleNamespace(module=model))  # through a DDP-style wrapper
    biased = copy.deepcopy(model)
    head = biased.lm_head
    biased.lm_head = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    assert not applies(biased)
    for key, value, ok in [("final_logit_softcapping", 30.0, False), ("final_logit_softcapping", None, True),
                           ("logit_scale", 0.5, False), ("logit_scale", 1.0, True), ("logits_scaling", 2.0, False)]:  # fmt: skip
        m = copy.deepcopy(model)
        setattr(m.config, key, value)
        assert applies(m) is ok, (key, value)


def test_a_biased_head_falls_back_to_the_models_own_logits(tiny):
    """Where the chunked head does not apply, response_logprobs is log_softmax of the model's logits."""
    model, tokenizer = tiny
    biased = copy.deepcopy(model)
    head = biased.lm_head
    biased.lm_head = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        biased.lm_head.weight.copy_(head.weight)
        biased.lm_head.bias.copy_(torch.randn(head.out_features) * 3)
    s = samples_for(tokenizer, seed=5, share=False, n=1)[0]
    with torch.no_grad():
        logp, _ = response_logprobs(biased, collate([s], tokenizer.pad_token_id, "cpu"), 0.9)
        logits = biased(torch.tensor([s.prompt_ids + s.response_ids])).logits[0].double()
    n, p = len(s.response_ids), len(s.prompt_ids)
    expected = torch.log_softmax(logits[p - 1 : p + n - 1] / 0.9, -1).gather(-1, torch.tensor(s.response_ids)[:, None])
    close(logp[0, -n:], expected[:, 0])
    with torch.no_grad():  # vocab 0 (LearnerConfig's default) means every row, as None does
        every_row, _ = response_logprobs(biased, collate([s], tokenizer.pad_token_id, "cpu"), 0.9, vocab=0)
    close(every_row[0, -n:], expected[:, 0])
