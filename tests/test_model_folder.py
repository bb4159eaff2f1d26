"""A model folder is whole or refused: config, weights and tokenizer (agents/model.py `check_model_dir`).

Each damage case is made on a copy of the tiny model's folder and checked twice: by the check itself
(one line naming the file or the problem) and through `algos.train.main --model DIR` (exit 2, exactly
one `error:` line, nothing written to the output dir). The tokenizer's behavioural check
(`check_tokenizer`, through `load_tokenizer`) is what a hub id gets once downloaded; a damaged cached
built-in model is refused with the line that says to delete it; a LoRA adapter's tokenizer is checked
too. No model is trained or run: each case takes a fraction of a second.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from agents.model import builtin_path, check_model_dir, load_tokenizer, resolve_model
from algos.train import main as train_main


def _edit(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _empty_vocab(model: Path) -> None:
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["model"].update(vocab={}, merges=[])
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))


# (id, damage to the tiny model's folder, what the line says, load_tokenizer refuses it too: a hub id's check)
CASES = [
    ("tokenizer-json-missing", lambda m: (m / "tokenizer.json").unlink(),
     'tokenizer.json is missing; the tokenizer transformers builds without it knows only its 3 special tokens '
     '("go north" encodes to no tokens)', True),
    ("tokenizer-json-truncated", lambda m: (m / "tokenizer.json").write_bytes((m / "tokenizer.json").read_bytes()[:1000]),
     "tokenizer.json is not valid JSON", True),
    ("tokenizer-json-empty-vocab", _empty_vocab, 'the tokenizer knows only 7 tokens ("go north" encodes to no tokens)',
     True),
    ("tokenizer-config-missing", lambda m: (m / "tokenizer_config.json").unlink(),
     "tokenizer_config.json is missing; without it transformers takes Qwen2Tokenizer's defaults (EOS <|endoftext|>)",
     False),  # the tokenizer still works, with the wrong EOS: only the folder's files tell
    ("chat-template-missing", lambda m: (m / "chat_template.jinja").unlink(), "the tokenizer has no chat template",
     True),
    ("chat-template-broken", lambda m: (m / "chat_template.jinja").write_text("{% for m in messages %}{{ m }"),
     "the tokenizer's chat template does not render a prompt (TemplateSyntaxError", True),
    ("eos-token-unknown", lambda m: _edit(m / "tokenizer_config.json", eos_token="<|eot|>"),
     "the tokenizer's EOS <|eot|> is id 1028, outside the model's vocabulary (vocab_size 1028 in config.json)", True),
    ("eos-id-out-of-vocab", lambda m: _edit(m / "generation_config.json", eos_token_id=5000),
     "the eos_token_id of generation_config.json is id 5000, outside the model's vocabulary", True),
    ("config-json-missing", lambda m: (m / "config.json").unlink(), "is not a saved model (no config.json", False),
    ("weights-missing", lambda m: (m / "model.safetensors").unlink(), "holds no weights (*.safetensors)", False),
]  # fmt: skip


@pytest.fixture
def model(tiny_path, tmp_path) -> Path:
    return Path(shutil.copytree(tiny_path, tmp_path / "model"))


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def nothing_in(out: Path) -> bool:
    """No file written (the output-dir check may leave the folder itself, empty: algos/run_lock.py)."""
    return not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("damage, says, tokenizer_refuses", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_damaged_model_folder_is_refused_in_one_line(model, tmp_path, capsys, damage, says, tokenizer_refuses):
    damage(model)
    with pytest.raises(ValueError) as e:
        check_model_dir(model)
    line = str(e.value)
    assert says in line and str(model) in line and "\n" not in line
    if tokenizer_refuses:  # what a hub id gets: the same check when its tokenizer is loaded
        with pytest.raises(ValueError) as e:
            load_tokenizer(str(model))
        assert str(model) in str(e.value) and "\n" not in str(e.value)
    out = tmp_path / "run"
    assert train_main(["--model", str(model), "--iterations", "1", "--output-dir", str(out)]) == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and says in lines[0] and str(model) in lines[0]
    assert nothing_in(out)  # refused before anything was written


def test_the_intact_folder_is_accepted(model):
    check_model_dir(model)
    tok = load_tokenizer(str(model))
    assert tok.decode(tok.encode("go north", add_special_tokens=False)) == "go north"


def test_a_damaged_cached_built_in_model_says_to_delete_it(tiny_path, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TEXTRL_CACHE", str(tmp_path / "cache"))
    cached = builtin_path("tiny")
    shutil.copytree(tiny_path, cached)
    (cached / "tokenizer.json").unlink()
    assert resolve_model("tiny") == str(cached)  # never built over: the damage stays for the check to name
    out = tmp_path / "run"
    assert train_main(["--model", "tiny", "--iterations", "1", "--output-dir", str(out)]) == 2
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "tokenizer.json is missing" in lines[0]
    assert f"{cached} is the cached built-in model tiny: delete it (rm -r {cached})" in lines[0]
    assert nothing_in(out)


def test_a_lora_adapter_checkpoint_has_its_tokenizer_checked(tiny_path, tmp_path):
    from agents.model import add_lora, load_model

    adapter = tmp_path / "adapter"
    add_lora(load_model(tiny_path, "cpu", torch.float32), 2, 4.0, 0.0, "q_proj").save_pretrained(adapter)
    load_tokenizer(tiny_path).save_pretrained(adapter)  # beside the adapter, as RunDir.save_checkpoint does
    check_model_dir(adapter)
    (adapter / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="tokenizer.json is missing; the tokenizer transformers builds without it"):
        check_model_dir(adapter)
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        (adapter / name).unlink()
    with pytest.raises(ValueError, match="holds no tokenizer .*an adapter's tokenizer is loaded from its own folder"):
        check_model_dir(adapter)


def test_a_hub_id_that_cannot_be_had_is_one_line(tmp_path, monkeypatch, capsys):
    """Not a folder, not cached, and the Hub unreachable (offline here): one line before anything is written."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    out = tmp_path / "run"
    assert train_main(["--model", "nosuchorg/nosuchmodel", "--iterations", "1", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --model nosuchorg/nosuchmodel is not a folder here")
    assert not out.exists()
