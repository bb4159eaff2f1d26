"""Inverse-CDF sampling (agents/backend.py) against independent float64 references: planted uniforms
at the edges of [0, 1), zero weights wherever they can hide, the real vocabulary size, top-p, and the
HF backend's `vocab` limit (padded head rows are never sampled, and the first PPO ratio stays 1)."""

import copy
import math

import numpy as np
import pytest
import torch

from agents.backend import BLOCK, HFBackend, block_sums, draw, sample
from agents.generation import Sampling
from algos.config import LearnerConfig
from algos.learner import Learner
from algos.logprobs import Sample, collate, response_logprobs

V_REAL = 151_936  # Qwen2.5's head rows: 593.5 blocks, so the last block is short
TINY_F64 = 5e-324  # the smallest positive float64
TINY_F32 = float(np.finfo(np.float32).smallest_subnormal)  # 1.4e-45
BELOW_ONE = 1.0 - 2.0**-53  # the largest float64 below 1
EDGE_US = [0.0, TINY_F64, TINY_F32, BELOW_ONE]


def reference_draw(weights: np.ndarray, u: float) -> int:
    """The first index whose running float64 sum exceeds u * total."""
    cum = np.cumsum(weights.astype(np.float64))
    return int(np.searchsorted(cum, u * cum[-1], side="right"))


def run_draw(row: np.ndarray, us: list[float]) -> list[int]:
    weights = torch.tensor(row, dtype=torch.float32).repeat(len(us), 1)
    return draw(weights, block_sums(weights), torch.tensor(us, dtype=torch.float64)).tolist()


def integer_rows(vocab: int, seed: int) -> dict[str, np.ndarray]:
    """Small-integer weights (float32 block sums and float64 running sums are exact) with zeros at
    the start, the end, inside blocks and in whole blocks."""
    rng = np.random.default_rng(seed)
    base = rng.integers(1, 4, vocab).astype(np.float64)
    base[rng.random(vocab) < 0.3] = 0.0  # zeros inside blocks
    rows = {}
    r = base.copy()
    r[: BLOCK + 37] = 0.0  # a whole leading block and part of the next
    rows["leading zeros"] = r
    r = base.copy()
    r[-(BLOCK + 11) :] = 0.0  # the tail, reaching into the block before the last
    rows["trailing zeros"] = r
    r = base.copy()
    r[2 * BLOCK : 3 * BLOCK] = 0.0  # one whole block inside
    r[:5] = 0.0
    r[-3:] = 0.0
    rows["zero block inside"] = r
    r = np.zeros(vocab)
    r[[BLOCK - 1, BLOCK, 2 * BLOCK + 5]] = [1.0, 2.0, 3.0]  # three tokens, two blocks apart
    rows["sparse"] = r
    r = np.zeros(vocab)
    r[vocab - 1] = 1.0  # the very last index: in the (possibly short) last block
    rows["last only"] = r
    r = np.zeros(vocab)
    r[0] = 1.0
    rows["first only"] = r
    r = np.zeros(vocab)
    r[vocab // BLOCK * BLOCK - 1] = 2.0  # the last entry of the last full block
    r[3 * BLOCK] = 1.0
    rows["block edges"] = r
    return rows


def planted_us(row: np.ndarray, rng: np.random.Generator) -> list[float]:
    """Edge uniforms, random ones, and uniforms whose target lands exactly on / next to a boundary."""
    cum = np.cumsum(row)
    total = cum[-1]
    us = [*EDGE_US, 0.5, *rng.random(64).tolist()]
    for i in rng.choice(np.flatnonzero(row), size=min(8, int((row > 0).sum())), replace=False):
        if cum[i] < total:
            u = cum[i] / total
            us += [u, float(np.nextafter(u, 0.0)), float(np.nextafter(u, 1.0))]
    return [u for u in us if 0.0 <= u < 1.0]


@pytest.mark.parametrize("vocab", [3 * BLOCK + 100, 4 * BLOCK, 9 * BLOCK + 1])
def test_draw_is_the_exact_inverse_cdf_and_never_picks_a_zero_weight(vocab):
    rng = np.random.default_rng(vocab)
    for name, row in integer_rows(vocab, seed=vocab).items():
        us = planted_us(row, rng)
        got = run_draw(row, us)
        for u, index in zip(us, got):
            assert 0 <= index < vocab, (name, u, index)
            assert row[index] > 0, f"{name}: u={u!r} drew index {index} of weight 0"
            assert index == reference_draw(row, u), (name, u, index)
        positive = np.flatnonzero(row)
        assert got[0] == got[1] == got[2] == positive[0]  # u = 0 and the tiniest u: the first positive entry
        assert got[3] == positive[-1]  # u just below 1: the last positive entry (each weight >> total * 2^-53)


def test_draw_on_float_weights_matches_the_float64_reference():
    """Random float32 weights (rounding in the block sums): the same index wherever u is not within
    rounding of a boundary, and always a positive weight."""
    rng = np.random.default_rng(1)
    vocab = 5 * BLOCK + 77
    row = rng.lognormal(0.0, 2.0, vocab).astype(np.float32)
    row[rng.random(vocab) < 0.2] = 0.0
    row[:BLOCK] = 0.0
    row[-40:] = 0.0
    row[3 * BLOCK : 4 * BLOCK] = 0.0
    row[10] = np.float32(TINY_F32)  # a subnormal weight: positive, so drawable
    us = [*EDGE_US, *rng.random(2000).tolist()]
    got = run_draw(row, us)
    cum = np.cumsum(row.astype(np.float64))
    total = cum[-1]
    checked = 0
    for u, index in zip(us, got):
        assert row[index] > 0, (u, index)
        j = reference_draw(row, u)
        lo = cum[j - 1] if j else 0.0
        if min(u * total - lo, cum[j] - u * total) > 1e-5 * total:
            assert index == j, (u, index, j)
            checked += 1
    assert checked > 1900


def test_draw_where_every_weight_is_subnormal():
    row = np.zeros(3 * BLOCK + 5, dtype=np.float32)
    row[[BLOCK + 3, 3 * BLOCK + 4]] = np.float32(TINY_F32)
    got = run_draw(row, [*EDGE_US, 0.49, 0.51])
    assert got == [BLOCK + 3, BLOCK + 3, BLOCK + 3, 3 * BLOCK + 4, BLOCK + 3, 3 * BLOCK + 4]


# ---------------------------------------------------------------------------------------- sample


def log_softmax64(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    return torch.log_softmax(logits.double() / temperature, -1)


def nucleus(probs: np.ndarray, top_p: float) -> set[int]:
    """The smallest set of the most likely tokens whose mass reaches top_p (distinct probabilities)."""
    order = np.argsort(-probs, kind="stable")
    mass = np.cumsum(probs[order])
    n = int(np.searchsorted(mass, top_p, side="left")) + 1
    return set(order[:n].tolist())


def real_vocab_logits(seed: int = 0) -> tuple[torch.Tensor, list[int], np.ndarray]:
    """[V_REAL] logits: 5 heavy tokens (one in the short last block) over a light tail, -inf at the
    start, the end, in a whole block and scattered. Returns (logits, heavy ids, -inf ids)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(V_REAL, generator=g) * 0.5
    heavy = [3, 1000, 77_777, 151_000, V_REAL - 2]
    logits[heavy] = torch.tensor([12.8, 12.5, 12.0, 11.3, 10.9])
    neg = torch.zeros(V_REAL, dtype=torch.bool)
    neg[:3] = True
    neg[-1] = True
    neg[40 * BLOCK : 41 * BLOCK] = True
    neg[torch.randperm(V_REAL, generator=g)[:5000]] = True
    neg[heavy] = False
    logits[neg] = float("-inf")
    return logits, heavy, torch.nonzero(neg)[:, 0].numpy()


@pytest.fixture
def planted(monkeypatch):
    """Make sample's torch.rand return a chosen u for every row."""

    def plant(u: float):
        def rand(n, *args, dtype=torch.float32, device=None, **kwargs):
            return torch.full((n,), u, dtype=dtype, device=device)

        monkeypatch.setattr(torch, "rand", rand)

    return plant


@pytest.mark.parametrize("top_p", [1.0, 0.7, 0.5])
def test_sample_with_planted_uniforms_stays_in_the_support_and_the_nucleus(planted, top_p):
    logits, heavy, neg = real_vocab_logits()
    probs = torch.softmax(logits.double(), -1).numpy()
    allowed = nucleus(probs, top_p) if top_p < 1 else set(np.flatnonzero(probs > 0).tolist())
    if top_p < 1:
        assert allowed < set(heavy)  # the test's premise: a peaked distribution, a nucleus of heavy tokens
    ref = log_softmax64(logits)
    for u in EDGE_US:
        planted(u)
        token, logprob = sample(logits.repeat(3, 1), Sampling(temperature=1.0, top_p=top_p), torch.Generator())
        assert set(token.tolist()) == {min(allowed) if u < 0.5 else max(allowed)}, u
        assert torch.allclose(logprob.double(), ref[token], atol=1e-5)  # before top-p truncation
    assert min(allowed) not in neg and max(allowed) not in neg


def test_sample_small_vocab_with_minus_inf_and_planted_uniforms(planted):
    logits = torch.tensor([[float("-inf"), 0.0, float("-inf"), 1.0, 2.0, float("-inf")]])
    for u, want in [(0.0, 1), (TINY_F64, 1), (TINY_F32, 1), (BELOW_ONE, 4)]:
        planted(u)
        assert sample(logits.clone(), Sampling(), torch.Generator())[0].item() == want
        # top_p 0.6: p = (0.090, 0.245, 0.665) -> the nucleus is {4} alone
        assert sample(logits.clone(), Sampling(top_p=0.6), torch.Generator())[0].item() == 4
        # top_p 0.8: {4, 3}
        got = sample(logits.clone(), Sampling(top_p=0.8), torch.Generator())[0].item()
        assert got == (3 if u < 0.5 else 4)


def frequencies_within(tokens: np.ndarray, probs: np.ndarray, groups: dict[str, np.ndarray], sigmas: float = 5.0):
    """Each group's frequency among `tokens` within `sigmas` binomial standard deviations of its probability."""
    counts = np.bincount(tokens, minlength=len(probs))
    n = len(tokens)
    for name, ids in groups.items():
        p = float(probs[ids].sum())
        freq = counts[ids].sum() / n
        sigma = math.sqrt(p * (1 - p) / n)
        assert abs(freq - p) <= sigmas * sigma + 1e-12, f"{name}: frequency {freq:.5f}, probability {p:.5f}"


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sample_at_real_vocab_follows_the_distribution(temperature):
    base, heavy, neg = real_vocab_logits(seed=1)
    logits = base * temperature  # softmax(logits / T) is the base distribution: a real tail at either T
    probs = torch.softmax(logits.double() / temperature, -1).numpy()
    ref = log_softmax64(logits, temperature)
    tail = np.setdiff1d(np.arange(V_REAL), heavy)
    assert 0.1 < probs[tail].sum() < 0.6  # the test's premise: a real tail, heavy tokens that matter
    g = torch.Generator().manual_seed(2)
    tokens = []
    for _ in range(40):  # 4,000 draws, 100 rows x 151,936 logits at a time
        token, logprob = sample(logits.repeat(100, 1), Sampling(temperature=temperature), g)
        assert torch.allclose(logprob.double(), ref[token], atol=1e-5)
        tokens.append(token.numpy())
    tokens = np.concatenate(tokens)
    assert np.bincount(tokens, minlength=V_REAL)[neg].sum() == 0
    frequencies_within(tokens, probs, {**{f"token {t}": np.array([t]) for t in heavy}, "tail": tail})


def test_draw_at_real_vocab_follows_the_distribution_tightly():
    """100,000 inverse-CDF draws from sample's own weights, exp(z - max z), in batches: the heavy
    tokens and the tail's mass region by region (blocks, the short last block) within 5 sigma."""
    logits, heavy, neg = real_vocab_logits(seed=1)
    weights = (logits - logits.max()).exp()[None]  # [1, V]
    probs = torch.softmax(logits.double(), -1).numpy()
    g = torch.Generator().manual_seed(3)
    rows = 20_000
    sums = block_sums(weights).expand(rows, -1)
    tokens = np.concatenate([
        draw(weights.expand(rows, -1), sums, torch.rand(rows, generator=g, dtype=torch.float64)).numpy()
        for _ in range(5)
    ])  # fmt: skip
    assert np.bincount(tokens, minlength=V_REAL)[neg].sum() == 0
    tail = np.setdiff1d(np.arange(V_REAL), heavy)
    groups = {f"token {t}": np.array([t]) for t in heavy}
    groups["tail"] = tail
    for k, part in enumerate(np.array_split(tail, 12)):
        groups[f"tail part {k}"] = part
    groups["last short block"] = np.setdiff1d(np.arange(V_REAL // BLOCK * BLOCK, V_REAL), heavy)
    frequencies_within(tokens, probs, groups)


@pytest.mark.slow
def test_top_p_at_real_vocab_samples_the_renormalised_nucleus():
    logits, heavy, neg = real_vocab_logits(seed=3)
    probs = torch.softmax(logits.double(), -1).numpy()
    keep = sorted(nucleus(probs, 0.6))
    assert 2 <= len(keep) < len(heavy)
    g = torch.Generator().manual_seed(4)
    ref = log_softmax64(logits)
    tokens = []
    for _ in range(12):
        token, logprob = sample(logits.repeat(100, 1), Sampling(temperature=1.0, top_p=0.6), g)
        assert torch.allclose(logprob.double(), ref[token], atol=1e-5)  # the untruncated logprob
        tokens.append(token.numpy())
    tokens = np.concatenate(tokens)
    assert set(tokens.tolist()) == set(keep)
    renorm = np.zeros_like(probs)
    renorm[keep] = probs[keep] / probs[keep].sum()
    frequencies_within(tokens, renorm, {f"token {t}": np.array([t]) for t in keep})


def test_greedy_returns_the_argmax_and_its_logprob_at_temperature_one():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(6, V_REAL, generator=g) * 3
    logits[:, :100] = float("-inf")
    logits[2, 151_935] = 20.0  # the argmax in the short last block
    logits[3, 0] = 25.0  # the argmax in the first position
    for s in (Sampling(temperature=0.0), Sampling(temperature=0.0, top_p=0.1)):
        token, logprob = sample(logits.clone(), s, g)
        assert torch.equal(token, logits.argmax(-1))
        assert token[2] == 151_935 and token[3] == 0
        assert torch.allclose(logprob.double(), log_softmax64(logits)[torch.arange(6), token], atol=1e-5)


# ----------------------------------------------------------------------- the HF backend's vocab limit

PROMPT = "You are in the kitchen. Exits: north."
PADDED = 151_700  # a head row beyond the tokenizer (151,665 tokens)


@pytest.fixture(scope="module")
def padded_favourite(qwen):
    """The profile with head rows 151700.. (tied: also embedding rows, never in the input) set so that
    along the greedy in-vocabulary response a padded row has logit 60 at every step: overwhelmingly
    the most likely token at the prefill and at each cached decode step. Returns (model, tokenizer,
    prompt ids, that greedy response)."""
    model, tokenizer = qwen
    model = copy.deepcopy(model)
    ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    vocab = len(tokenizer)
    # Rows >= vocab change neither the hidden states nor an in-vocabulary argmax: compute the greedy
    # response first, then plant one padded row per position that predicts a response token.
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1, :vocab]
        greedy = [int(logits.argmax())]
        for _ in range(3):
            greedy.append(int(model(torch.tensor([ids + greedy])).logits[0, -1, :vocab].argmax()))
        full = torch.tensor([ids + greedy[:-1]])
        hidden = model(full, output_hidden_states=True).hidden_states[-1][0, len(ids) - 1 :]  # after the final norm
        for k, h in enumerate(hidden):
            model.lm_head.weight[PADDED + k] = h * (60.0 / h.dot(h))
        probs = torch.softmax(model(full).logits[0, len(ids) - 1 :], -1)  # [4, V]
    assert model.model.embed_tokens.weight.data_ptr() == model.lm_head.weight.data_ptr()
    assert probs[0].argmax().item() == PADDED
    assert bool((probs.argmax(-1) >= vocab).all()) and bool((probs[:, vocab:].sum(-1) > 0.999).all())
    assert tokenizer.eos_token_id not in greedy[:-1]
    return model, tokenizer, ids, greedy


def test_hf_backend_with_vocab_never_samples_padded_rows(padded_favourite):
    model, tokenizer, ids, greedy = padded_favourite
    vocab = len(tokenizer)
    eos = [tokenizer.eos_token_id]
    limited = HFBackend(model, eos, tokenizer.pad_token_id, seed=0, vocab=vocab)
    out, _ = limited.generate([ids] * 3, Sampling(temperature=0.0, max_new_tokens=4))
    assert out == [greedy] * 3  # prefill and every decode step: the in-vocabulary argmax
    out, _ = limited.generate([ids] * 16, Sampling(temperature=1.0, max_new_tokens=4))
    assert all(len(r) >= 1 and max(r) < vocab for r in out), out
    unlimited = HFBackend(model, eos, tokenizer.pad_token_id, seed=0)  # proves the test can fail
    assert unlimited.generate([ids], Sampling(temperature=0.0, max_new_tokens=2))[0][0][0] == PADDED
    first = [r[0] for r in unlimited.generate([ids] * 16, Sampling(temperature=1.0, max_new_tokens=1))[0]]
    assert all(t >= vocab for t in first)


def test_first_ppo_ratio_is_one_with_padded_rows(padded_favourite):
    model, tokenizer, ids, _ = padded_favourite
    vocab, pad = len(tokenizer), tokenizer.pad_token_id
    other = tokenizer("Compass: treasure", add_special_tokens=False)["input_ids"]
    prompts = [ids] * 6 + [other] * 2
    backend = HFBackend(model, [tokenizer.eos_token_id], pad, seed=1, vocab=vocab)
    out, lps = backend.generate(prompts, Sampling(temperature=1.0, max_new_tokens=5))
    samples = [Sample(p, r, (-1.0) ** k, lp) for k, (p, r, lp) in enumerate(zip(prompts, out, lps))]
    with torch.no_grad():
        logp, _ = response_logprobs(model, collate(samples, pad, "cpu"), 1.0, vocab=vocab)
        unlimited, _ = response_logprobs(model, collate(samples, pad, "cpu"), 1.0)
    for row, lp in enumerate(lps):
        assert torch.allclose(logp[row, -len(lp) :], torch.tensor(lp), atol=1e-4)
    for row in range(6):  # without the limit the padded row takes the first token's mass: the test can fail
        assert unlimited[row, -len(lps[row])] < lps[row][0] - 10
    learner = Learner(copy.deepcopy(model), LearnerConfig(rollout_is="off", autocast="off", num_minibatches=1, ppo_epochs=1), pad, vocab=vocab)
    stats = learner.update(samples)
    assert abs(stats["train/ratio_max"] - 1.0) < 1e-3
    assert abs(stats["train/ratio_mean"] - 1.0) < 1e-4
