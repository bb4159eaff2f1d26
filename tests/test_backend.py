import torch

from agents.backend import HFBackend
from agents.generation import Sampling
from algos.logprobs import Sample, collate, response_logprobs


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


def test_equal_prompts_share_one_prefill_and_sample_independently(tiny):
    """A group's rollouts start from one prompt: it runs through the model once, its cache rows are
    copied, and each row still samples its own tokens with the trainer's logprobs."""
    model, tokenizer = tiny
    backend = HFBackend(model, [tokenizer.eos_token_id], tokenizer.pad_token_id, batch_size=16, seed=5)
    a, b, c = _prompts(tokenizer)
    prompts = [a, b, a, a, c, b, a, a]
    seen = []
    hook = model.model.embed_tokens.register_forward_hook(lambda m, args, out: seen.append(tuple(args[0].shape)))
    try:
        ids, lps = backend.generate(prompts, Sampling(temperature=1.0, max_new_tokens=12))
    finally:
        hook.remove()
    assert seen[0] == (3, len(a))  # the prefill: the 3 distinct prompts, not 8
    assert all(shape == (8, 1) for shape in seen[1:])  # then one token for each of the 8 rows
    assert len({tuple(r) for r, p in zip(ids, prompts) if p is a}) > 1  # copies are sampled independently
    samples = [Sample(p, r, 0.0, lp) for p, r, lp in zip(prompts, ids, lps)]
    with torch.no_grad():
        logp, _ = response_logprobs(model, collate(samples, tokenizer.pad_token_id, "cpu"), 1.0)
    for row, (r, lp) in enumerate(zip(ids, lps)):
        assert torch.allclose(logp[row, -len(r) :], torch.tensor(lp), atol=1e-4)
    greedy = Sampling(temperature=0.0, max_new_tokens=10)  # and the same tokens as each prompt alone
    assert backend.generate(prompts, greedy)[0] == [backend.generate([p], greedy)[0][0] for p in prompts]


def test_sampling_draws_from_the_temperature_scaled_distribution():
    """Inverse-CDF sampling picks token i with probability softmax(logits / T)_i (and top-p keeps its nucleus)."""
    from agents.backend import sample

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(40_000, 1)
    generator = torch.Generator().manual_seed(0)
    token, logprob = sample(logits.clone(), Sampling(temperature=1.0), generator)
    freq = torch.bincount(token, minlength=4).float() / len(token)
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.01)  # 4 sigma at n = 40k
    assert torch.allclose(logprob, torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))[token], atol=1e-6)
    hot = torch.softmax(logits[0] / 2.0, -1)
    freq = torch.bincount(sample(logits.clone(), Sampling(temperature=2.0), generator)[0], minlength=4).float() / len(token)
    assert torch.allclose(freq, hot, atol=0.01)
    nucleus = sample(logits.clone(), Sampling(temperature=1.0, top_p=0.7), generator)[0]  # 0.5 + 0.3 reach 0.7
    assert set(nucleus.tolist()) == {0, 1}
    assert abs((nucleus == 0).float().mean().item() - 0.5 / 0.8) < 0.01


def _opening_prompts(tokenizer):
    opening = "You play a text game. Reply with <action>a command</action>. Task: open the door.\n"
    texts = ["You are in the kitchen. Exits: north.", "Compass: treasure", "hi", "You are in the hall."]
    return [tokenizer(opening + t, add_special_tokens=False)["input_ids"] for t in texts]


def test_a_shared_opening_runs_once_and_samples_what_whole_prompts_sample(tiny, qwen):
    """Distinct prompts that open alike (system prompt, task): the opening runs as one row, the rest of
    each prompt on its copied cache; the same seed then samples the same tokens as whole prompts do, with
    the trainer's logprobs."""
    for model, tokenizer in (tiny, qwen):
        prompts = _opening_prompts(tokenizer)
        opening = next(i for i in range(len(prompts[0])) if len({p[i] for p in prompts}) > 1)
        prompts = prompts + [prompts[1]]  # a repeated prompt too: its rest runs once
        seen = []
        record = lambda m, args, out, seen=seen: seen.append(tuple(args[0].shape))  # noqa: E731
        hook = model.model.embed_tokens.register_forward_hook(record)
        sampling = Sampling(temperature=1.0, max_new_tokens=12)
        try:
            backend = HFBackend(model, [tokenizer.eos_token_id], tokenizer.pad_token_id, seed=5)
            shared = backend.generate(prompts, sampling)
        finally:
            hook.remove()
        assert seen[0] == (1, opening)
        assert seen[1] == (4, max(len(p) for p in prompts) - opening)  # the 4 distinct rests, left-padded
        whole = HFBackend(model, [tokenizer.eos_token_id], tokenizer.pad_token_id, seed=5,
                          share_opening=False).generate(prompts, sampling)  # fmt: skip
        assert shared[0] == whole[0]
        assert all(len(r) >= 1 for r in shared[0])
        for a, b in zip(shared[1], whole[1]):
            assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5)
        samples = [Sample(p, r, 0.0, lp) for p, r, lp in zip(prompts, *shared)]
        with torch.no_grad():
            logp, _ = response_logprobs(model, collate(samples, tokenizer.pad_token_id, "cpu"), 1.0)
        for row, (r, lp) in enumerate(zip(*shared)):
            assert torch.allclose(logp[row, -len(r) :], torch.tensor(lp), atol=1e-4)


def test_a_plain_copy_synced_from_a_lora_model_samples_what_the_lora_model_samples(tiny):
    """LoRA on the HF backend samples from a plain copy with the adapter merged in at each sync (one matmul
    per layer, not three): the same seed samples the same tokens as the adapter model, with its logprobs."""
    import copy

    from agents.model import add_lora

    model, tokenizer = tiny
    plain = copy.deepcopy(model)
    lora = add_lora(copy.deepcopy(model), rank=4, alpha=8, dropout=0.0, targets="all-linear")
    for name, p in lora.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)  # peft starts B at 0; make the adapter matter
    prompts, sampling = _opening_prompts(tokenizer), Sampling(temperature=1.0, max_new_tokens=12)
    merged = HFBackend(plain, [tokenizer.eos_token_id], tokenizer.pad_token_id, seed=3)
    before = merged.generate(prompts, sampling)
    merged.generator.manual_seed(3)
    merged.sync(lora)
    synced = merged.generate(prompts, sampling)
    own = HFBackend(lora, [tokenizer.eos_token_id], tokenizer.pad_token_id, seed=3).generate(prompts, sampling)
    assert synced[0] == own[0] != before[0]  # the adapter's tokens, not the base model's
    for a, b in zip(synced[1], own[1]):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5)
