import copy
import math
import random
from dataclasses import replace

import pytest
import torch

from agents.backend import shared_opening
from algos.config import LearnerConfig
from algos.learner import Learner, aggregate, ppo_token_loss, rollout_is_weights
from algos.logprobs import Sample, collate, response_logprobs


def test_ratio_one_reduces_to_the_policy_gradient():
    logp = torch.tensor([[-0.5, -1.0], [-2.0, -0.1]], requires_grad=True)
    adv = torch.tensor([2.0, -1.0])
    loss, _ = ppo_token_loss(logp, logp.detach(), adv, 0.2, 0.28)
    loss.sum().backward()
    pg = logp.detach().clone().requires_grad_(True)
    (-(adv[:, None] * pg)).sum().backward()
    assert torch.allclose(logp.grad, pg.grad)
    assert torch.allclose(loss, -adv[:, None].expand(2, 2))


def test_clipping_hand_computed():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 1.5, 0.5, 0.5]])).requires_grad_(True)
    # one sequence per column would need per-token advantages: use 4 sequences of 1 token
    logp4, old4 = logp.T, old.T
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    loss, info = ppo_token_loss(logp4, old4, adv, epsilon=0.2, epsilon_high=0.28)
    # A>0, r=1.5: clipped at 1.28; A<0, r=1.5: unclipped 1.5; A<0, r=0.5: clipped at 0.8;
    # A>0, r=0.5: unclipped 0.5 (the pessimistic branch)
    assert torch.allclose(loss[:, 0], torch.tensor([-1.28, 1.5, 0.8, -0.5]))
    assert info["clipped"][:, 0].tolist() == [True, False, True, False]
    loss.sum().backward()
    grad = logp.grad[0]
    assert grad[0] == 0 and grad[2] == 0  # clipped tokens carry no gradient
    assert torch.isclose(grad[1], torch.tensor(1.5)) and torch.isclose(grad[3], torch.tensor(-0.5))


def test_k3_kl_hand_computed():
    logp = torch.log(torch.tensor([[0.25]]))
    ref = torch.log(torch.tensor([[0.5]]))
    loss, info = ppo_token_loss(logp, logp, torch.tensor([0.0]), 0.2, 0.2, ref_logp=ref, beta=0.1)
    expected = 2.0 - math.log(2.0) - 1.0  # e^d - d - 1 with d = log 2
    assert math.isclose(info["kl"].item(), expected, rel_tol=1e-6)
    assert math.isclose(loss.item(), 0.1 * expected, rel_tol=1e-6)


def test_aggregation_modes_hand_computed():
    tok = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert aggregate(tok, mask, "dapo", 2, 3, 4).item() == pytest.approx(2.0)  # 6 / 3 tokens
    assert aggregate(tok, mask, "grpo", 2, 3, 4).item() == pytest.approx(2.25)  # (1.5 + 3) / 2
    assert aggregate(tok, mask, "dr_grpo", 2, 3, 4).item() == pytest.approx(0.75)  # 6 / (2 x 4)
    with pytest.raises(ValueError, match="loss_type"):
        aggregate(tok, mask, "sum", 2, 3, 4)


def _samples(tokenizer, n=6, seed=0):
    rng = random.Random(seed)
    vocab = len(tokenizer)
    out = []
    for _ in range(n):
        p = [rng.randrange(3, vocab) for _ in range(rng.randint(3, 9))]
        r = [rng.randrange(3, vocab) for _ in range(rng.randint(1, 5))]
        out.append(Sample(p, r, rng.uniform(-1, 1), [rng.uniform(-6, -4) for _ in r]))
    return out


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_micro_batches_give_the_same_update_as_one_batch(tiny, loss_type):
    model, tokenizer = tiny
    samples = _samples(tokenizer)
    params, losses = [], []
    for micro in (1, 4, 64):
        m = copy.deepcopy(model)
        cfg = LearnerConfig(rollout_is="off", autocast="off", loss_type=loss_type, micro_batch_size=micro, num_minibatches=1, max_grad_norm=1e9)
        learner = Learner(m, cfg, tokenizer.pad_token_id)
        learner.optimizer = torch.optim.SGD(m.parameters(), lr=1.0)  # delta = -gradient
        learner.scheduler = torch.optim.lr_scheduler.LambdaLR(learner.optimizer, lambda _: 1.0)
        losses.append(learner.update(samples)["train/loss"])
        params.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    assert losses[0] == pytest.approx(losses[1], abs=1e-6) and losses[0] == pytest.approx(losses[2], abs=1e-6)
    base = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert (params[0] - base).abs().max() > 1e-6  # the update did something
    assert torch.allclose(params[0], params[1], atol=1e-6) and torch.allclose(params[0], params[2], atol=1e-6)


def test_response_logprobs_ignore_padding(tiny):
    model, tokenizer = tiny
    samples = _samples(tokenizer, n=4)
    pad = tokenizer.pad_token_id
    with torch.no_grad():
        together, _ = response_logprobs(model, collate(samples, pad, "cpu"))
        for row, s in enumerate(samples):
            alone, _ = response_logprobs(model, collate([s], pad, "cpu"))
            n = len(s.response_ids)
            assert torch.allclose(together[row, -n:], alone[0], atol=1e-5)


def test_non_finite_gradient_skips_the_step(tiny):
    model, tokenizer = tiny
    m = copy.deepcopy(model)
    learner = Learner(m, LearnerConfig(rollout_is="off", autocast="off", num_minibatches=1), tokenizer.pad_token_id)
    bad = [Sample(s.prompt_ids, s.response_ids, float("nan"), s.old_logprobs) for s in _samples(tokenizer)]
    before = [p.detach().clone() for p in m.parameters()]
    stats = learner.update(bad)
    assert stats["train/skipped_frac"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))


def test_clip_fractions_low_and_high_count_what_they_claim():
    old = torch.zeros(4, 1)
    logp = torch.log(torch.tensor([[1.5], [1.5], [0.5], [0.5]]))
    _, info = ppo_token_loss(logp, old, torch.tensor([1.0, -1.0, -1.0, 1.0]), epsilon=0.2, epsilon_high=0.28)
    assert info["clipped_high"][:, 0].tolist() == [True, False, False, False]  # r > 1.28 with A > 0
    assert info["clipped_low"][:, 0].tolist() == [False, False, True, False]  # r < 0.8 with A < 0


def test_dual_clip_caps_the_loss_of_negative_advantages():
    old = torch.zeros(3, 1)
    logp = torch.log(torch.tensor([[5.0], [2.0], [5.0]])).requires_grad_(True)
    adv = torch.tensor([-1.0, -1.0, 1.0])
    loss, info = ppo_token_loss(logp, old, adv, 0.2, 0.28, clip_ratio_c=3.0)
    # A<0, r=5: plain PPO gives 5, dual clip caps it at 3; A<0, r=2: 2 (under the cap); A>0, r=5: -1.28
    assert torch.allclose(loss[:, 0], torch.tensor([3.0, 2.0, -1.28]))
    assert info["dual_clipped"][:, 0].tolist() == [True, False, False]
    loss.sum().backward()
    assert logp.grad[0, 0] == 0 and torch.isclose(logp.grad[1, 0], torch.tensor(2.0)) and logp.grad[2, 0] == 0


def test_gspo_sequence_ratio_hand_computed():
    old = torch.zeros(2, 2)
    logp = torch.log(torch.tensor([[1.1, 0.9], [1.5, 1.0]])).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # the second response has one token
    loss, info = ppo_token_loss(logp, old, torch.tensor([1.0, 1.0]), 0.2, 0.28, mask=mask, importance="sequence")
    s0 = math.sqrt(1.1 * 0.9)  # exp(mean log ratio) = geometric mean of the token ratios
    assert torch.allclose(info["ratio"][0], torch.tensor([s0, s0]))
    assert torch.isclose(info["ratio"][1, 0], torch.tensor(1.5))
    assert torch.allclose(loss[0], torch.tensor([-s0, -s0]))  # inside the clip range
    assert torch.isclose(loss[1, 0], torch.tensor(-1.28))  # 1.5 > 1 + 0.28: clipped
    (loss * mask).sum().backward()
    assert torch.allclose(logp.grad[0], torch.tensor([-s0, -s0]))  # each token's gradient through its own logp
    assert logp.grad[1, 0] == 0
    with pytest.raises(ValueError, match="mask"):
        ppo_token_loss(logp, old, torch.tensor([1.0, 1.0]), 0.2, 0.28, importance="sequence")


def test_kl_estimators_hand_computed():
    logp, ref = torch.log(torch.tensor([[0.25]])), torch.log(torch.tensor([[0.5]]))
    d = math.log(2.0)  # log(ref / policy)
    for estimator, expected in (("k1", -d), ("k2", 0.5 * d * d), ("k3", 2.0 - d - 1.0)):
        _, info = ppo_token_loss(logp, logp, torch.tensor([0.0]), 0.2, 0.2, ref, 1.0, kl_estimator=estimator)
        assert math.isclose(info["kl"].item(), expected, rel_tol=1e-6), estimator
    with pytest.raises(ValueError, match="kl_estimator"):
        ppo_token_loss(logp, logp, torch.tensor([0.0]), 0.2, 0.2, ref, 1.0, kl_estimator="k4")


def _entropy(model, samples, pad):
    with torch.no_grad():
        batch = collate(samples, pad, "cpu")
        _, ent = response_logprobs(model, batch, with_entropy=True)
        return float((ent * batch["mask"]).sum() / batch["mask"].sum())


def test_entropy_bonus_raises_entropy_and_zero_length_responses_change_nothing(tiny):
    model, tokenizer = tiny
    pad = tokenizer.pad_token_id
    samples = [Sample(s.prompt_ids, s.response_ids, 0.0, s.old_logprobs) for s in _samples(tokenizer)]
    results = []
    for extra, coef in (([], 0.5), ([Sample([5, 6, 7], [], 3.0, [])], 0.5)):
        m = copy.deepcopy(model)
        learner = Learner(m, LearnerConfig(rollout_is="off", autocast="off", entropy_coef=coef, num_minibatches=1, max_grad_norm=1e9), pad)
        learner.optimizer = torch.optim.SGD(m.parameters(), lr=1.0)  # one step along -gradient
        learner.scheduler = torch.optim.lr_scheduler.LambdaLR(learner.optimizer, lambda _: 1.0)
        learner.update(samples + extra)
        results.append(m)
    assert _entropy(results[0], samples, pad) > _entropy(model, samples, pad)  # A = 0: only the bonus acts
    for a, b in zip(results[0].parameters(), results[1].parameters()):
        assert torch.equal(a, b)  # the empty response was masked out


def test_rollout_is_weights_hand_computed():
    trainer = torch.log(torch.tensor([[0.5, 0.3, 0.9], [0.2, 0.2, 0.2]]))
    rollout = torch.log(torch.tensor([[0.25, 0.3, 0.3], [0.2, 0.1, 0.5]]))
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # the last token of row 1 is padding
    # token ratios: row 0: 2, 1, 3; row 1: 1, 2 (padding ignored)
    w, st = rollout_is_weights(trainer, rollout, mask, "token", "truncate", 2.5)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, 2.5], [1.0, 2.0, 0.0]]))
    assert st["rollout_is/ratio_max"] == pytest.approx(3.0) and st["rollout_is/ratio_mean"] == pytest.approx(9 / 5)
    assert st["rollout_is/truncated_frac"] == pytest.approx(1 / 5)
    w, st = rollout_is_weights(trainer, rollout, mask, "token", "mask", 2.5)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, 0.0], [1.0, 2.0, 0.0]])) and st[
        "rollout_is/masked_frac"
    ] == pytest.approx(0.2)
    # sequence ratios: row 0: 2 x 1 x 3 = 6; row 1: 1 x 2 = 2
    w, _ = rollout_is_weights(trainer, rollout, mask, "sequence", "truncate", 4.0)
    assert torch.allclose(w, torch.tensor([[4.0, 4.0, 4.0], [2.0, 2.0, 0.0]]))
    w, st = rollout_is_weights(trainer, rollout, mask, "sequence", "mask", 4.0)
    assert torch.allclose(w, torch.tensor([[0.0, 0.0, 0.0], [2.0, 2.0, 0.0]]))  # the whole sequence is masked
    assert st["rollout_is/masked_frac"] == pytest.approx(3 / 5)


def test_rollout_is_recomputes_old_logprobs_so_the_first_ratio_is_one(tiny):
    model, tokenizer = tiny
    # a stale engine: its logprobs (-8) are far below the trainer's (about -6.9 for ~1000 tokens)
    samples = [replace(s, old_logprobs=[-8.0] * len(s.response_ids)) for s in _samples(tokenizer)]
    cfg = LearnerConfig(autocast="off", rollout_is="token", rollout_is_cap=2.0, num_minibatches=1, ppo_epochs=1)
    stats = Learner(copy.deepcopy(model), cfg, tokenizer.pad_token_id).update(samples)
    assert stats["train/ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # PPO's reference is the trainer's own
    assert stats["rollout_is/ratio_max"] > 2.0 and 0 < stats["rollout_is/truncated_frac"] <= 1
    plain = Learner(copy.deepcopy(model), replace(cfg, rollout_is="off"), tokenizer.pad_token_id).update(samples)
    assert "rollout_is/ratio_mean" not in plain and abs(plain["train/ratio_mean"] - 1.0) > 1e-2


def _shared_prompt_samples(tokenizer) -> list[Sample]:
    """12 samples over 4 distinct prompts (of 2 to 30 tokens) and one 2-token prompt, responses of 1-7 tokens."""
    rng = random.Random(3)
    prompts = [[rng.randrange(3, len(tokenizer)) for _ in range(rng.randint(2, 30))] for _ in range(4)]
    out = []
    for i in range(12):
        response = [rng.randrange(3, len(tokenizer)) for _ in range(rng.randint(1, 7))]
        prompt = prompts[i % 4] if i < 10 else [5, 6]
        out.append(Sample(list(prompt), response, rng.uniform(-1, 1), [rng.uniform(-3, -1) for _ in response]))
    return out


def _opening_samples(tokenizer, repeat: bool) -> list[Sample]:
    """10 samples whose prompts open with the same 12 tokens, then differ (2 to 25 tokens of their own);
    with `repeat`, 3 of them again (as a group's first prompts are)."""
    rng = random.Random(5)
    opening = [rng.randrange(3, len(tokenizer)) for _ in range(12)]
    out = []
    for _ in range(10):
        prompt = opening + [rng.randrange(3, len(tokenizer)) for _ in range(rng.randint(2, 25))]
        response = [rng.randrange(3, len(tokenizer)) for _ in range(rng.randint(1, 7))]
        out.append(Sample(prompt, response, rng.uniform(-1, 1), [rng.uniform(-3, -1) for _ in response]))
    return out + [replace(s, response_ids=s.response_ids[:1], old_logprobs=s.old_logprobs[:1]) for s in out[:3]] * repeat


def test_shared_opening_is_the_longest_opening_that_leaves_every_prompt_a_token():
    assert shared_opening([(1, 2, 3, 4), (1, 2, 5)]) == 2
    assert shared_opening([(1, 2, 3), (1, 2, 3, 4)]) == 2  # not all of (1, 2, 3): it would have no token left
    assert shared_opening([(1, 2), (3, 4)]) == 0
    assert shared_opening([(7,), (7, 8)]) == 0


@pytest.mark.parametrize("case", ["repeated prompts", "a shared opening", "both"])
def test_shared_prompts_run_once_and_give_the_same_logprobs_and_gradients(tiny, case):
    model, tokenizer = tiny
    samples = {"repeated prompts": lambda: _shared_prompt_samples(tokenizer),
               "a shared opening": lambda: _opening_samples(tokenizer, repeat=False),
               "both": lambda: _opening_samples(tokenizer, repeat=True)}[case]()  # fmt: skip
    shared = collate(samples, tokenizer.pad_token_id, "cpu", share_prompts=True)
    assert "ids" not in shared and "prefix_ids" not in collate(samples, tokenizer.pad_token_id, "cpu")  # off unless asked
    distinct, opening = {"repeated prompts": (5, 0), "a shared opening": (10, 12), "both": (10, 12)}[case]
    assert shared["prefix_ids"].shape[0] == distinct and shared["index"].shape[0] == len(samples)
    assert shared.get("opening_ids", torch.zeros(1, 0)).shape == (1, opening)
    results = []
    for batch in (collate(samples, tokenizer.pad_token_id, "cpu"), shared):
        m = copy.deepcopy(model).train()
        logp, entropy = response_logprobs(m, batch, 0.7, with_entropy=True)
        (-(logp * batch["mask"] * batch["adv"][:, None]).sum()).backward()
        results.append((logp.detach() * batch["mask"], entropy.detach() * batch["mask"],
                        torch.cat([p.grad.flatten() for p in m.parameters()])))  # fmt: skip
    (lp0, ent0, g0), (lp1, ent1, g1) = results
    assert torch.allclose(lp0, lp1, atol=1e-5) and torch.allclose(ent0, ent1, atol=1e-5)
    assert g0.abs().max() > 1e-3 and torch.allclose(g0, g1, atol=1e-6 * float(g0.abs().max()) + 1e-9, rtol=1e-4)


@pytest.mark.parametrize("opening", [False, True])
def test_learner_update_with_shared_prompts_equals_the_full_pass(tiny, opening):
    model, tokenizer = tiny
    samples = _opening_samples(tokenizer, repeat=True) if opening else _shared_prompt_samples(tokenizer)
    params, stats = [], []
    for share in (False, True):
        m = copy.deepcopy(model)
        cfg = LearnerConfig(rollout_is="off", autocast="off", micro_batch_size=5, num_minibatches=2, share_prompts=share, max_grad_norm=1e9)
        learner = Learner(m, cfg, tokenizer.pad_token_id, seed=1)
        learner.optimizer = torch.optim.SGD(m.parameters(), lr=1.0)  # delta = -gradient
        learner.scheduler = torch.optim.lr_scheduler.LambdaLR(learner.optimizer, lambda _: 1.0)
        stats.append(learner.update(samples))
        params.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    base = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert (params[0] - base).abs().max() > 1e-4
    assert torch.allclose(params[0], params[1], atol=1e-6)
    for key in ("train/loss", "train/entropy", "train/approx_kl", "train/clip_frac"):
        assert stats[0][key] == pytest.approx(stats[1][key], rel=1e-5, abs=1e-5), key


def test_a_kl_target_stops_the_update_before_the_step_that_would_pass_it(tiny):
    model, tokenizer = tiny
    samples = _samples(tokenizer)
    # rollout_is recomputes the old logprobs, so the first mini-batch starts on-policy (approx KL ~1e-13)
    cfg = LearnerConfig(autocast="off", rollout_is="token", ppo_epochs=2, num_minibatches=2, lr=1e-2)
    free = Learner(copy.deepcopy(model), cfg, tokenizer.pad_token_id).update(samples)
    assert free["train/optimizer_steps"] == 4 and free["train/early_stopped"] == 0
    tokens = sum(len(s.response_ids) for s in samples)
    assert free["train/backward_tokens"] == 2 * tokens  # every response, once per epoch
    assert free["train/approx_kl"] > 1e-6  # the later mini-batches measured the policy's move
    m = copy.deepcopy(model)
    before = [p.detach().clone() for p in m.parameters()]
    stopped = Learner(m, replace(cfg, target_kl=1e-9), tokenizer.pad_token_id).update(samples)
    assert stopped["train/optimizer_steps"] == 1 and stopped["train/early_stopped"] == 1
    # the second mini-batch ran its forward and backward before its KL stopped the step: one epoch's tokens
    assert stopped["train/backward_tokens"] == tokens
    assert any(not torch.equal(a, b) for a, b in zip(before, m.parameters()))  # the first step was taken
