"""--context chat: an episode as one conversation, token in and token out, trained as one sequence.

The drift test builds a conversation turn by turn exactly as the collector does (the sampled reply
ids, then the template's delta) and checks it against the template rendering the whole conversation
at once, on the tiny model's ChatML, on tiny-qwen2.5 (Qwen2.5's own template, tools rendered by it,
tool results in its tool role) and on SmolLM2. The loss tests hold an episode's aggregation, GSPO ratio
and rollout-correction weights to hand-computed values and to the same replies as step samples.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch
from cold_start import COLD_UPDATES

from agents.chat import ChatFormat
from agents.prompt import PromptBuilder
from agents.tools import ActionFormat
from algos.config import LearnerConfig
from algos.learner import Learner, aggregate, ppo_token_loss, rollout_is_weights
from algos.logprobs import Sample, collate, episode_sample
from algos.train import main

TASK = "Open the door."
EPISODE = [  # (observation, admissible, command the reply sends)
    ("You are in the hall. A key lies here.", ["take key", "go north"], "take key"),
    ("You took the key.", ["go north", "drop key"], "go north"),
    ("A locked door is north of you.", ["unlock door", "go south"], "unlock door"),
]


def build(tokenizer, action_format: str, native: bool) -> tuple[ChatFormat, ActionFormat]:
    fmt = ActionFormat(action_format)
    prompts = PromptBuilder(template="default", action_format=fmt)
    role = "tool" if action_format == "tool_call" else "user"
    return ChatFormat(tokenizer, prompts, role, fmt.tools_for(None) if native else None), fmt


def reply_ids(tokenizer, fmt: ActionFormat, command: str, eos: bool) -> tuple[str, list[int]]:
    text = fmt.reply(command)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text, ids + ([tokenizer.eos_token_id] if eos else [])


def assert_no_drift(tokenizer, action_format: str = "tag", native: bool = False) -> None:
    """Turn by turn (first prompt, each reply's ids, each observation's delta) equals the template's
    rendering of the whole conversation; a reply cut off before its EOS gets the template's closing."""
    chat, fmt = build(tokenizer, action_format, native)
    (obs, adm, _), later = EPISODE[0], EPISODE[1:]
    ids = chat.first(TASK, obs, adm)
    messages = chat.messages(TASK, obs, adm)
    pieces = [list(ids)]
    for step, ((obs, adm, _), (_, _, command)) in enumerate(zip(later, EPISODE), start=2):
        text, reply = reply_ids(tokenizer, fmt, command, eos=step != 3)  # the second reply is cut off (no EOS)
        before = list(ids)
        ids = chat.follow(ids, reply, step, obs, adm)
        assert ids[: len(before) + len(reply)] == before + reply  # the sampled ids, untouched
        pieces += [reply, ids[len(before) + len(reply) :]]
        messages += [{"role": "assistant", "content": text}, {"role": chat.role, "content": chat.prompts.turn(step, obs, adm)}]
    kwargs = {"tools": fmt.tools_for(None)} if native else {}
    whole = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    assert ids == tokenizer(whole, add_special_tokens=False)["input_ids"]
    assert sum(pieces, []) == ids and len(pieces) == 5
    if action_format == "tool_call" and native:
        assert "<tool_response>" in tokenizer.decode(pieces[2])  # Qwen2.5 renders the tool role as tool results


@pytest.mark.parametrize("action_format", ["tag", "tool_call"])
def test_no_drift_on_the_tiny_model(tiny, action_format):
    assert_no_drift(tiny[1], action_format)


@pytest.mark.slow
@pytest.mark.parametrize("action_format, native", [("tag", False), ("tool_call", True)])
def test_no_drift_on_tiny_qwen(qwen, action_format, native):
    assert_no_drift(qwen[1], action_format, native)


@pytest.mark.slow
def test_no_drift_on_smollm2(smollm2):
    assert_no_drift(smollm2[1], "tag")


QWEN3_LIKE = (  # drops the <think> block of every assistant turn but the last, as Qwen3's template does
    "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}<|im_start|>assistant\n"
    "{{ m['content'].split('</think>')[-1].lstrip('\n') }}<|im_end|>\n{% else %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_that_rewrites_earlier_turns_is_refused_in_one_line(tiny):
    tokenizer = copy.deepcopy(tiny[1])
    tokenizer.chat_template = QWEN3_LIKE
    with pytest.raises(ValueError, match=r"drops the <think> reasoning of earlier assistant turns") as e:
        build(tokenizer, "tag", False)
    assert "\n" not in str(e.value) and "--context window" in str(e.value)


def test_train_with_such_a_template_is_one_line_and_exit_2(tiny_path, tmp_path, capsys):
    model = tmp_path / "qwen3-like"
    shutil.copytree(tiny_path, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = QWEN3_LIKE
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in (model / "chat_template.jinja",):
        if extra.exists():
            extra.write_text(QWEN3_LIKE)
    assert main(["--model", str(model), "--context", "chat", "--sft-steps", "0", "--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --context chat: the chat template drops the <think> reasoning")


# ---- one sequence per episode ------------------------------------------------------------------
class _Step:  # what episode_sample reads of a collector Step
    def __init__(self, prompt_ids, response_ids, rollout_logprobs, traj_id=0):
        self.prompt_ids, self.response_ids, self.rollout_logprobs, self.traj_id = prompt_ids, response_ids, rollout_logprobs, traj_id


def two_turn_episode() -> Sample:
    """Prompt [1, 2]; reply [10, 11] (advantage 1), observation turn [20, 21], reply [12, 13, 14] (-0.5)."""
    steps = [_Step([1, 2], [10, 11], [-0.1, -0.2]), _Step([1, 2, 10, 11, 20, 21], [12, 13, 14], [-0.3, -0.4, -0.5])]
    return episode_sample(steps, [1.0, -0.5])


def test_an_episode_is_its_first_prompt_then_each_reply_and_observation_turn():
    s = two_turn_episode()
    assert s.prompt_ids == [1, 2] and s.response_ids == [10, 11, 20, 21, 12, 13, 14]
    assert s.mask == [1, 1, 0, 0, 1, 1, 1] and s.advantage == [1.0, 1.0, 0.0, 0.0, -0.5, -0.5, -0.5]
    assert s.old_logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3, -0.4, -0.5]
    assert (s.turns, s.trained_tokens) == (2, 5)
    drifted = [_Step([1, 2], [10, 11], [-0.1, -0.2]), _Step([1, 2, 10, 99, 20], [12], [-0.3])]
    with pytest.raises(RuntimeError, match="token drift"):
        episode_sample(drifted, [1.0, 1.0])


def window_pair() -> list[Sample]:
    """The same two replies as step samples."""
    return [Sample([1, 2], [10, 11], 1.0, [-0.1, -0.2]), Sample([1, 2, 10, 11, 20, 21], [12, 13, 14], -0.5, [-0.3, -0.4, -0.5])]


@pytest.mark.parametrize("loss_type, expected", [
    ("dapo", (-2.0 + 1.5) / 5),  # sum over the 5 trained tokens / 5
    ("grpo", (-1.0 + 0.5) / 2),  # mean over each reply (a "sequence" is one reply), then over the 2 replies
    ("dr_grpo", (-2.0 + 1.5) / (2 * 4)),  # sum / (2 replies x max_new_tokens 4)
])  # fmt: skip
def test_each_loss_type_on_an_episode_hand_computed_and_equal_to_step_samples(loss_type, expected):
    """At ratio 1 each trained token's loss is -A; observation tokens and padding weigh nothing."""
    for samples in ([two_turn_episode()], window_pair()):
        batch = collate(samples, 0, "cpu")
        tok, _ = ppo_token_loss(batch["old"], batch["old"], batch["adv"], 0.2, 0.28, mask=batch["mask"],
                                turn=batch.get("turn"))  # fmt: skip
        turns, tokens = sum(s.turns for s in samples), sum(s.trained_tokens for s in samples)
        loss = aggregate(tok, batch["mask"], loss_type, turns, tokens, 4, batch.get("turn"))
        assert loss.item() == pytest.approx(expected, abs=1e-7)


def test_gspo_and_sequence_level_rollout_correction_take_one_ratio_per_reply():
    batch = collate([two_turn_episode()], 0, "cpu")
    assert batch["turn"].tolist() == [[0, 0, -1, -1, 1, 1, 1]]
    old = batch["old"]
    logp = old + torch.tensor([[0.1, 0.3, 5.0, 5.0, 0.0, -0.3, 0.0]])  # the observation tokens' values never count
    tok, info = ppo_token_loss(logp, old, batch["adv"], 10.0, 10.0, mask=batch["mask"], importance="sequence",
                               turn=batch["turn"])  # fmt: skip
    first, second = torch.exp(torch.tensor(0.2)), torch.exp(torch.tensor(-0.1))  # exp(mean log ratio) per reply
    expected = [-first, -first, None, None, 0.5 * second, 0.5 * second, 0.5 * second]
    for got, want in zip(tok[0].tolist(), expected):
        if want is not None:
            assert got == pytest.approx(float(want), rel=1e-6)
    w, _ = rollout_is_weights(logp, old, batch["mask"], "sequence", "truncate", 100.0, batch["turn"])
    assert w[0].tolist() == pytest.approx([float(torch.exp(torch.tensor(0.4)))] * 2 + [0, 0] + [float(torch.exp(torch.tensor(-0.3)))] * 3, rel=1e-6)  # fmt: skip


def test_an_episode_update_is_the_same_however_micro_batches_cut_it(tiny):
    """Micro-batches by token count accumulate against the mini-batch's normalisers, like by sample count."""
    model, tokenizer = tiny
    vocab = len(tokenizer)
    episodes = []
    for k in range(4):
        prompt = [3 + (7 * k + j) % (vocab - 3) for j in range(5 + k)]
        steps, ids, advs = [], list(prompt), []
        for t in range(2 + k % 2):
            reply = [3 + (11 * k + 5 * t + j) % (vocab - 3) for j in range(2 + t)]
            steps.append(_Step(list(ids), reply, [-5.0] * len(reply)))
            ids += reply + [4, 5 + t]
            advs.append((-1) ** (k + t) * (0.5 + 0.1 * t))
        episodes.append(episode_sample(steps, advs))
    params = []
    for tokens in (0, 40, 1):
        m = copy.deepcopy(model)
        cfg = LearnerConfig(rollout_is="off", autocast="off", loss_type="grpo", num_minibatches=1, max_grad_norm=1e9,
                            micro_batch_tokens=tokens, share_prompts=False)  # fmt: skip
        learner = Learner(m, cfg, tokenizer.pad_token_id)
        learner.optimizer = torch.optim.SGD(m.parameters(), lr=1.0)
        learner.scheduler = torch.optim.lr_scheduler.LambdaLR(learner.optimizer, lambda _: 1.0)
        chunks = learner._chunks(episodes)
        assert len(chunks) == {0: 1, 40: 3, 1: 4}[tokens]  # episodes of 12, 19, 14 and 21 tokens
        assert all(len(c) * max(len(e.prompt_ids) + len(e.response_ids) for e in c) <= (tokens or 99) or len(c) == 1
                   for c in chunks)  # fmt: skip
        stats = learner.update(episodes)
        assert stats["train/backward_tokens"] == sum(e.trained_tokens for e in episodes) * cfg.ppo_epochs
        params.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    base = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert (params[0] - base).abs().max() > 1e-6
    assert torch.allclose(params[0], params[1], atol=1e-6) and torch.allclose(params[0], params[2], atol=1e-6)


# ---- end to end ------------------------------------------------------------------------------
CHAT_RUN = ["--context", "chat", "--env", "KeyDoor-Easy-v0", "--env-kwargs", "max_episode_steps=6", "--num-groups", "2",
            "--group-size", "4", "--sft-steps", "10", "--sft-episodes", "4", "--sft-batch-size", "12", "--eval-episodes",
            "2", "--max-new-tokens", "16", "--iterations", "1", *COLD_UPDATES]  # fmt: skip


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("action_format", ["tag", "tool_call"])
def test_chat_trains_end_to_end_one_conversation_per_episode(tmp_path, action_format):
    out = tmp_path / "run"
    assert main([*CHAT_RUN, "--action-format", action_format, "--output-dir", str(out)]) == 0
    (it,) = [r for r in rows(out) if r["iteration"] == 1 and "rollout/success_rate" in r]
    assert "train/loss" in it or it["train/update_skipped"] == 1.0
    record = json.loads((out / "transcripts.jsonl").read_text().splitlines()[0])
    assert record["conversation"].count("<|im_start|>assistant") == len(record["steps"])
    assert all("prompt" not in step for step in record["steps"])


@pytest.mark.slow
def test_a_conversation_that_outgrows_the_context_ends_truncated_and_is_counted(tmp_path):
    out = tmp_path / "run"
    assert main([*CHAT_RUN, "--max-context-tokens", "240", "--sft-steps", "0", "--output-dir", str(out)]) == 0
    (it,) = [r for r in rows(out) if r["iteration"] == 1 and "rollout/success_rate" in r]
    assert it["rollout/context_truncated"] == 8  # every episode: none wins or reaches its 6 steps within 240 tokens
    assert 2 <= it["rollout/episode_length"] < 6 and it["rollout/prompt_tokens"] <= 240 - 16


def test_held_episodes_survive_a_checkpoint_with_their_masks():
    from algos.distributed import SINGLE
    from algos.run import LoopState

    loop = LoopState(3, held=[two_turn_episode(), *window_pair()])
    again = LoopState.from_dict(3, json.loads(json.dumps(loop.to_dict(SINGLE))), SINGLE)
    assert again.held == loop.held


# ---- with the rest of the trainer: a real template (tiny-qwen2.5, tool results in its tool role) ----------
QWEN_CHAT = ["--context", "chat", "--model", "tiny-qwen2.5", "--action-format", "tool_call", "--env", "KeyDoor-Easy-v0",
             "--env-kwargs", "max_episode_steps=3", "--num-groups", "2", "--group-size", "2", "--sft-steps", "2",
             "--sft-episodes", "2", "--sft-batch-size", "4", "--eval-episodes", "0", "--max-new-tokens", "32"]  # fmt: skip


@pytest.fixture(scope="module")
def qwen_run(tmp_path_factory, qwen_path) -> Path:
    out = tmp_path_factory.mktemp("chat") / "run"
    assert main([*QWEN_CHAT, "--iterations", "2", "--save-every", "1", "--output-dir", str(out)]) == 0
    return out


@pytest.mark.slow
def test_resume_and_evaluate_a_chat_run(qwen_run, tmp_path):
    import sys

    from scripts.evaluate import main as evaluate_main

    sys.path.insert(0, str(Path(__file__).parent))
    from test_real_vocab import assert_resume_relogs

    record = json.loads((qwen_run / "transcripts.jsonl").read_text().splitlines()[0])
    assert "<tool_response>" in record["conversation"]  # observations came back as tool results
    assert_resume_relogs(qwen_run, tmp_path)
    out = tmp_path / "report.json"
    assert evaluate_main(["--checkpoint", str(qwen_run / "checkpoints" / "iter_2"), "--episodes", "2", "--output",
                          str(out), "--no-plots"]) == 0  # fmt: skip
    assert json.loads(out.read_text())["policies"]["model"]["episodes"] == 2


@pytest.mark.slow
def test_env_workers_give_the_same_chat_run(qwen_run, tmp_path):
    out = tmp_path / "workers"
    assert main([*QWEN_CHAT, "--iterations", "1", "--env-workers", "2", "--output-dir", str(out)]) == 0
    ours = [r for r in rows(out) if r["iteration"] <= 1]
    theirs = [r for r in rows(qwen_run) if r["iteration"] <= 1]
    assert any("train/loss" in r or "train/update_skipped" in r for r in ours)
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))} for r in rs]  # noqa: E731
    assert strip(ours) == strip(theirs)


@pytest.mark.slow
def test_lora_and_torchrun_train_in_chat(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_distributed import torchrun

    assert main([*CHAT_RUN, "--lora-rank", "4", "--output-dir", str(tmp_path / "lora")]) == 0
    assert (tmp_path / "lora" / "checkpoints" / "iter_1" / "adapter_config.json").is_file()
    proc = torchrun(["-m", "algos.train", *CHAT_RUN, "--eval-episodes", "0", "--output-dir", str(tmp_path / "dist")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert any("train/loss" in r or "train/update_skipped" in r for r in rows(tmp_path / "dist"))


@pytest.mark.slow
@pytest.mark.parametrize("action_format", ["tag", "tool_call"])
def test_vllm_chat_run_with_prefix_caching_passes_the_sync_check(tmp_path, action_format):
    import subprocess
    import sys

    pytest.importorskip("vllm")
    from algos.weight_sync import tolerance_for

    out = tmp_path / "vllm"
    proc = subprocess.run([sys.executable, "-m", "algos.train", *CHAT_RUN, "--backend", "vllm", "--vllm-kv-cache-gib",
                           "0.25", "--eval-episodes", "0", "--action-format", action_format, "--output-dir", str(out)],
                          capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    synced = [r for r in rows(out) if "sync/logprob_diff_max" in r]
    assert synced and all(r["sync/logprob_diff_max"] < tolerance_for("float32") for r in synced)
    trained = [r for r in rows(out) if "train/loss" in r]
    assert all(r["rollout_is/ratio_mean"] == pytest.approx(1.0, abs=0.05) for r in trained)  # the engine's logprobs


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("share", [False, True])
def test_the_head_runs_only_where_an_episode_trains_and_gives_the_same_logprobs(tiny, monkeypatch, chunked, share):
    """Observation columns skip the LM head; trained tokens' logprobs and gradients are those of the full pass."""
    from algos import lm_head
    from algos.logprobs import response_logprobs

    model, tokenizer = tiny
    if not chunked:
        monkeypatch.setattr(lm_head, "applies", lambda m: False)
    first = [5, 6, 7, 8]
    a = episode_sample([_Step(first, [10, 11], [-1.0, -1.0]), _Step(first + [10, 11, 20, 21, 22], [12], [-1.0])], [1.0, 2.0])
    b = episode_sample([_Step(first, [13], [-1.0]), _Step(first + [13, 23, 24], [14, 15], [-1.0, -1.0])], [-1.0, 0.5])
    batch = collate([a, b], tokenizer.pad_token_id, "cpu", share_prompts=share)
    assert ("prefix_ids" in batch) == share
    full = {k: v for k, v in batch.items() if k != "turn"}  # without turns: every column through the head
    grads = []
    for b_ in (batch, full):
        model.zero_grad()
        logp, entropy = response_logprobs(model, b_, with_entropy=True)
        (logp * b_["mask"]).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        if b_ is batch:
            ours = (logp * batch["mask"], entropy * batch["mask"])
        else:
            theirs = (logp * batch["mask"], entropy * batch["mask"])
    assert torch.allclose(ours[0], theirs[0], atol=1e-6) and torch.allclose(ours[1], theirs[1], atol=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-6)
    model.zero_grad()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_hf_reuses_each_conversations_kv_cache_and_samples_what_a_full_prefill_samples(tiny, temperature):
    """Three turns of four conversations (two with equal first prompts): each later turn's prompt extends the
    last prompt and reply, so only its new tokens run; replies and logprobs are those of prefilling it all."""
    from agents.backend import HFBackend
    from agents.generation import Sampling

    model, tokenizer = tiny
    eos = [tokenizer.eos_token_id]
    sampling = Sampling(temperature=temperature, max_new_tokens=6)
    reusing, plain = (HFBackend(model, eos, tokenizer.pad_token_id, seed=3, reuse_prefixes=r) for r in (True, False))
    first = [tokenizer(f"<|im_start|>user\nroom {k % 2}<|im_end|>\n<|im_start|>assistant\n")["input_ids"] for k in range(4)]
    prompts = [list(p) for p in first]
    calls, delta = [], []
    model.forward, real = (lambda *a, **kw: calls.append(kw["input_ids"].shape) or real(*a, **kw)), model.forward
    try:
        for turn in range(3):
            calls.clear()
            ours = reusing.generate(prompts, sampling)
            ran = calls[0][1]  # the prefill's width: kept prefixes are not run again
            theirs = plain.generate(prompts, sampling)
            assert ours[0] == theirs[0]  # the same tokens (the same seed, the same distributions)
            for a, b in zip(ours[1], theirs[1]):
                assert a == pytest.approx(b, abs=1e-5)
            if turn:  # at most the last reply's final token (never run) and the new turn
                assert ran <= 1 + len(delta) < min(map(len, prompts))
            delta = tokenizer(f"<|im_end|>\n<|im_start|>user\nturn {turn}<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
            prompts = [p + r + delta for p, r in zip(prompts, ours[0])]
            # one kept cache per distinct conversation (equal greedy ones share it), each a prefix of its next prompt
            assert 1 < len(reusing.kept) <= 4 and all(any(q[: len(k)] == list(k) for q in prompts) for k in reusing.kept)
    finally:
        model.forward = real
    reusing.release()
    assert reusing.kept == {}
