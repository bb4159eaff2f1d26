"""Models and tokenizers by name: the built-in ones, built here on first use, or any Hugging Face causal LM.

`resolve_model` turns `--model` into a folder or hub id. `tiny` (the default, agents/tiny.py) and
the other built-in models (agents/profiles.py, agents/smollm2.py) are built once into a cache folder
and from then on loaded exactly like a hub model (`from_pretrained`), so the code path that serves
the tiny model also serves `--model Qwen/Qwen2.5-1.5B-Instruct` on a GPU. Also here: checking a
saved model's files before a run trusts them, LoRA (loading an adapter checkpoint, wrapping a model
in a fresh adapter) and the forward precision. Getting full Hugging Face weights out of a LoRA or
FSDP model is agents/weights.py.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from agents.profiles import PROFILES, profile_path
from agents.smollm2 import SMOLLM2, SourceError, build_smollm2, gguf_file
from agents.tiny import TINY, build_tiny_model, tiny_model_path

BUILDERS = {**PROFILES, SMOLLM2: build_smollm2}  # the built-in models besides tiny: name -> build(path)
RANDOM_INIT = (TINY, *PROFILES)  # built-in models with random weights (SmolLM2 is pretrained)


def is_local_path(name: str) -> bool:
    """Paths are local; `org/name` that does not exist locally is taken as a hub id."""
    return os.path.exists(name) or name.startswith(("/", ".", "~")) or name.count("/") > 1


def is_builtin(name: str) -> bool:
    """`tiny` (agents/tiny.py) or another built-in model (agents/profiles.py: tiny-qwen2.5, random-qwen2.5-1.5b;
    agents/smollm2.py: smollm2-135m-instruct): built locally on first use."""
    return name == TINY or name in BUILDERS


def source_problem(name: str) -> str | None:
    """Why a built-in profile cannot be built here, in one line (smollm2-135m-instruct: its wheel is
    missing or damaged), or None: it is built already, or needs nothing installed."""
    if name != SMOLLM2 or (profile_path(name) / "config.json").exists():
        return None
    try:
        gguf_file()
    except SourceError as e:
        return str(e)
    return None


def model_missing(name: str) -> bool:
    """A local model path that does not exist (hub ids and built-in models are not checked here)."""
    return not is_builtin(name) and is_local_path(name) and not os.path.exists(os.path.expanduser(name))


def resolve_model(name: str) -> str:
    """`tiny` or a profile -> the cached built-in model (built on first use); anything else unchanged."""
    if not is_builtin(name):
        return os.path.expanduser(name) if is_local_path(name) else name
    path = tiny_model_path() if name == TINY else profile_path(name)
    if not (path / "config.json").exists():
        (build_tiny_model if name == TINY else BUILDERS[name])(path)
    return str(path)


def load_tokenizer(path: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """A chat model's tokenizer, padded on the left (batched generation appends on the right) and given a pad
    token if it ships without one. ValueError without a chat template: prompts are rendered with it."""
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    tok.padding_side = "left"
    if tok.pad_token_id is None:  # many chat models ship without one
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ValueError(f"the tokenizer of {path} has no chat template; use an instruct model")
    return tok


def stop_ids(tokenizer: PreTrainedTokenizerBase, model: torch.nn.Module) -> list[int]:
    """Every id generation stops at: the tokenizer's EOS and each EOS id of the checkpoint's
    generation_config (Qwen: <|im_end|> and <|endoftext|>; Llama-3: <|eot_id|>, <|end_of_text|>, ...)."""
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [tokenizer.eos_token_id] + (list(extra) if isinstance(extra, (list, tuple)) else [extra])
    return sorted({i for i in ids if i is not None})


def is_adapter(path: str) -> bool:
    """A peft adapter checkpoint (adapter_config.json, no full model of its own)."""
    return os.path.isfile(os.path.join(path, "adapter_config.json")) and not os.path.isfile(
        os.path.join(path, "config.json")
    )


def is_model_dir(path: str | os.PathLike) -> bool:
    """A saved model: Hugging Face weights (config.json) or a LoRA adapter."""
    return os.path.isfile(os.path.join(path, "config.json")) or is_adapter(str(path))


def check_model_dir(path: str | os.PathLike, trust_remote_code: bool = False) -> None:
    """Raise ValueError (one line, naming the file) unless a saved model's files are intact: every
    JSON file parses, the config is one transformers reads, and every safetensors file opens with a
    header that covers the file (a truncated one fails) and holds the tensors its index names. Cheap:
    no tensor data is read."""
    import json

    from safetensors import safe_open
    from transformers import AutoConfig

    path = Path(path)
    if not is_model_dir(path):
        raise ValueError(f"{path} is not a saved model (no config.json or adapter_config.json)")
    for f in sorted(path.glob("*.json")):
        try:
            json.loads(f.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{f} is not valid JSON ({e})") from None
    if not is_adapter(str(path)):
        try:
            AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        except (ValueError, OSError, KeyError) as e:
            raise ValueError(f"{path / 'config.json'} is not a model config ({str(e).splitlines()[0]})") from None
    files = sorted(path.glob("*.safetensors"))
    if not files and not list(path.glob("*.bin")):
        raise ValueError(f"{path} holds no weights (*.safetensors)")
    index = path / "model.safetensors.index.json"
    wanted: dict[str, set[str]] = {}
    if index.is_file():
        for key, name in json.loads(index.read_text()).get("weight_map", {}).items():
            wanted.setdefault(name, set()).add(key)
    missing = sorted(wanted.keys() - {f.name for f in files})
    if missing:
        raise ValueError(f"{path / missing[0]} is missing (named by {index.name})")
    for f in files:
        try:
            with safe_open(str(f), "pt") as st:
                keys = set(st.keys())
        except Exception as e:  # SafetensorError: a truncated file's header no longer covers it
            raise ValueError(f"{f} is damaged ({str(e).splitlines()[0]}; truncated?)") from None
        if not keys or not wanted.get(f.name, set()) <= keys:
            lacks = f"tensors named by {index.name} are missing" if keys else "no tensors"
            raise ValueError(f"{f} is damaged ({lacks})")


def adapter_base(path: str) -> str:
    """The base model an adapter checkpoint was trained on (recorded by peft)."""
    import json

    with open(os.path.join(path, "adapter_config.json")) as f:
        return json.load(f)["base_model_name_or_path"]


def load_model(
    path: str, device: str | torch.device, dtype: torch.dtype, trust_remote_code: bool = False, adapter: str = "merge"
) -> torch.nn.Module:
    """A causal LM from a folder or hub id. A LoRA adapter checkpoint loads its base model first,
    then the adapter: kept trainable (`adapter="train"`) or merged into the weights ("merge")."""
    if is_adapter(path):
        from peft import PeftModel

        base = load_model(adapter_base(path), device, dtype, trust_remote_code)
        model = PeftModel.from_pretrained(base, path, is_trainable=adapter == "train")
        return model if adapter == "train" else model.merge_and_unload()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
    return model.to(device)


def add_lora(model: torch.nn.Module, rank: int, alpha: float, dropout: float, targets: str) -> torch.nn.Module:
    """Wrap `model` in a fresh LoRA adapter (peft) of `rank`, scaled alpha / rank: only the adapter's
    weights train. `targets`: "all-linear" (every linear layer but the LM head) or comma-separated
    module names."""
    from peft import LoraConfig, get_peft_model

    modules = targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()]
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=modules,
                        task_type="CAUSAL_LM")  # fmt: skip
    return get_peft_model(model, config)


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Recompute activations in the backward pass instead of keeping them (non-reentrant)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


BF16_MIN_PARAMETERS = 20_000_000  # below this a CPU step is overhead-bound: bf16 buys nothing (docs/benchmarks.md)


def cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 matrix units (AMX or AVX512-BF16), where bf16 matmuls run about 2x
    (AVX512-BF16) to 5x (AMX) faster than float32."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:  # not Linux: torch's own probe (AVX512 is not enough; it says nothing about bf16)
        return torch.backends.cpu.get_cpu_capability() == "AMX"
    return "amx_bf16" in flags or "avx512_bf16" in flags


def parameter_count(path: str, trust_remote_code: bool = False) -> int:
    """The parameters of the model a folder or hub id holds (a LoRA adapter: its base's), counted on the
    meta device from its config: no weights are read or allocated."""
    from transformers import AutoConfig

    source = adapter_base(path) if is_adapter(path) else path
    config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return sum(p.numel() for p in model.parameters())


def positions(path: str, trust_remote_code: bool = False) -> int | None:
    """The longest sequence the model's config allows (max_position_embeddings), or None when it names none."""
    from transformers import AutoConfig

    source = adapter_base(path) if is_adapter(path) else path
    config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def precision(mode: str, device: str | torch.device, parameters: int) -> str:
    """`--autocast` resolved to "bf16" or "off". auto: bf16 on a GPU that supports it, and on a CPU
    with bf16 matrix units (cpu_has_bf16) for a model of at least BF16_MIN_PARAMETERS `parameters`;
    off otherwise (the tiny model keeps float32, where its numbers were measured)."""
    if mode != "auto":
        return mode
    kind = torch.device(device).type
    if kind == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "off"
    return "bf16" if kind == "cpu" and parameters >= BF16_MIN_PARAMETERS and cpu_has_bf16() else "off"


def autocast(device: str | torch.device, mode: str) -> contextlib.AbstractContextManager:
    """The learner's and the HF backend's forward precision: `bf16` autocast, or none (`off`); a run
    resolves `auto` once (`precision`, algos/resolve.py)."""
    kind = torch.device(device).type
    return torch.autocast(kind, dtype=torch.bfloat16) if mode == "bf16" else contextlib.nullcontext()
