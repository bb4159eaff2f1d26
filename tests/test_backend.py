import torch

from agents.backend import HFBackend, Sampling
from algos.learner import Sample, collate, response_logprobs


def _prompts(tokenizer):
    texts = ["You are in the kitchen. Exits: north.", "Compass: treasure", "hi"]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_rollout_logprobs_equal_trainer_logprobs(tiny):
    model, tokenizer = tiny
    backend = HFBackend(model, [tokenizer.eos_token_id], tokenizer.pad_token_id, batch_size=8, seed=1)
    prompts = _prompts(tokenizer)
    for temperature in (1.0, 0.7):
        ids, lps = backend.generate(prompts, Sampling(temperature=temperature, max_new_tokens=12))
        samples = [Sample(p, r, 0.0, lp) for p, r, lp in zip(prompts, ids, lps)]
        with torch.no_grad():
            logp, _ = response_logprobs(model, collate(samples, tokenizer.pad_token_id, "cpu"), temperature)
        for row, (r, lp) in enumerate(zip(ids, lps)):
            assert len(r) == len(lp) >= 1
            assert torch.allclose(logp[row, -len(r) :], torch.tensor(lp), atol=1e-4)


def test_batching_and_padding_do_not_change_greedy_output(tiny):
    model, tokenizer = tiny
    backend = HFBackend(model, [tokenizer.eos_token_id], tokenizer.pad_token_id, batch_size=8)
    prompts = _prompts(tokenizer)
    greedy = Sampling(temperature=0.0, max_new_tokens=10)
    together, _ = backend.generate(prompts, greedy)
    alone = [backend.generate([p], greedy)[0][0] for p in prompts]
    assert together == alone


def test_stops_at_eos_and_respects_max_new_tokens(tiny):
    model, tokenizer = tiny
    backend = HFBackend(model, [tokenizer.eos_token_id], tokenizer.pad_token_id, seed=3)
    ids, _ = backend.generate(_prompts(tokenizer) * 4, Sampling(max_new_tokens=5))
    for r in ids:
        assert 1 <= len(r) <= 5
        assert tokenizer.eos_token_id not in r[:-1]  # nothing after an EOS


def test_same_seed_same_samples(tiny):
    model, tokenizer = tiny
    runs = [
        HFBackend(model, [tokenizer.eos_token_id], tokenizer.pad_token_id, seed=7).generate(
            _prompts(tokenizer), Sampling()
        )
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
