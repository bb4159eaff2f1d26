"""Models and tokenizers: the tiny local default, or any Hugging Face causal LM.

`--model tiny` (the default) builds, once, a small Qwen2-architecture causal LM from a
config and a byte-level BPE tokenizer trained with `tokenizers` on text from the built-in
envs and a committed sample of TextWorld text (agents/data, made by scripts/tw_corpus.py),
with a ChatML chat template. Both are saved with `save_pretrained` into a cache
folder and from then on loaded exactly like a hub model (`from_pretrained`), so the code
path that serves the tiny model also serves `--model Qwen/Qwen2.5-1.5B-Instruct` on a GPU.
Nothing is downloaded.

Why these sizes: 4 layers, hidden 128 and 4 heads give head_dim 32 (vLLM's CPU attention
kernels need >= 32); ~1M parameters keep a CPU iteration in seconds. Its embeddings are untied;
the real-vocabulary profile `--model tiny-qwen2.5` (agents/profiles.py) has tied ones, as
Qwen2.5-0.5B/1.5B and Llama-3.2 do, and the tests sync it into vLLM in place exactly.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from agents.profiles import PROFILES, profile_path, save_atomically
from agents.smollm2 import SMOLLM2, SourceError, build_smollm2, gguf_file
from envs.base import cache_dir

TINY = "tiny"
TINY_VERSION = "v2"
TEXTWORLD_CORPUS = Path(__file__).parent / "data" / "textworld_corpus.txt"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAGS = ["<think>", "</think>", "<action>", "</action>"]


BUILDERS = {**PROFILES, SMOLLM2: build_smollm2}  # the built-in models besides tiny: name -> build(path)
RANDOM_INIT = (TINY, *PROFILES)  # built-in models with random weights (SmolLM2 is pretrained)


def tiny_model_path() -> Path:
    return cache_dir() / f"tiny-qwen2-{TINY_VERSION}"


def is_local_path(name: str) -> bool:
    """Paths are local; `org/name` that does not exist locally is taken as a hub id."""
    return os.path.exists(name) or name.startswith(("/", ".", "~")) or name.count("/") > 1


def is_builtin(name: str) -> bool:
    """`tiny` or another built-in model (agents/profiles.py: tiny-qwen2.5, random-qwen2.5-1.5b; agents/smollm2.py:
    smollm2-135m-instruct):
    built locally on first use."""
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


def corpus_steps(env, seed: int, builder, rng: random.Random, max_steps: int):
    """(chat messages, action) for each step of one episode that takes the expert's action with
    probability 0.7 and a random admissible command otherwise: tokenizer training text."""
    obs, info = env.reset(seed=seed)
    history: list[tuple[str, str]] = []
    for _ in range(max_steps):
        cmds = info["admissible_commands"] or ["look"]
        expert = info["expert_action"]
        action = expert if expert and rng.random() < 0.7 else rng.choice(cmds)
        yield builder.messages(info["task"], history, obs, cmds), action
        history.append((obs, action))
        obs, _, term, trunc, info = env.step(action)
        if term or trunc:
            return


def env_corpus(episodes_per_env: int = 60, seed: int = 0) -> list[str]:
    """Text the agent will read and write: observations, commands, prompt scaffolding."""
    import gymnasium as gym

    import envs
    from agents.prompt import PromptBuilder

    rng = random.Random(seed)
    builder = PromptBuilder(memory=1)
    lines = []
    for env_id in envs.KEYDOOR_IDS:
        env = gym.make(env_id)
        for ep in range(episodes_per_env):
            for msgs, action in corpus_steps(env, seed + ep, builder, rng, max_steps=40):
                lines += [m["content"] for m in msgs] + [f"<action>{action}</action>"]
        env.close()
    lines += TEXTWORLD_CORPUS.read_text().splitlines()  # committed sample: scripts/tw_corpus.py
    return lines + ["system\nuser\nassistant\n"] * 200  # chat-template role names


def build_tokenizer(vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any byte encodes
        show_progress=False,
    )
    tok.train_from_iterator(env_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.add_tokens(TAGS)  # one token per tag, still decoded as text
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_tiny_model(path: Path, seed: int = 0) -> None:
    """Build tokenizer + randomly initialised Qwen2 model and save them atomically."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    save_atomically(path, model, tokenizer)


def load_tokenizer(path: str, trust_remote_code: bool = False):
    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    tok.padding_side = "left"
    if tok.pad_token_id is None:  # many chat models ship without one
        tok.pad_token = tok.eos_token
    if tok.chat_template is None:
        raise ValueError(f"the tokenizer of {path} has no chat template; use an instruct model")
    return tok


def stop_ids(tokenizer, model) -> list[int]:
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


def is_model_dir(path) -> bool:
    """A saved model: Hugging Face weights (config.json) or a LoRA adapter."""
    return os.path.isfile(os.path.join(path, "config.json")) or is_adapter(str(path))


def check_model_dir(path, trust_remote_code: bool = False) -> None:
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


def load_model(path: str, device: str, dtype: torch.dtype, trust_remote_code: bool = False, adapter: str = "merge"):
    """A causal LM from a folder or hub id. A LoRA adapter checkpoint loads its base model first,
    then the adapter: kept trainable (`adapter="train"`) or merged into the weights ("merge")."""
    if is_adapter(path):
        from peft import PeftModel

        base = load_model(adapter_base(path), device, dtype, trust_remote_code)
        model = PeftModel.from_pretrained(base, path, is_trainable=adapter == "train")
        return model if adapter == "train" else model.merge_and_unload()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
    return model.to(device)


def add_lora(model, rank: int, alpha: float, dropout: float, targets: str):
    """Wrap `model` in a fresh LoRA adapter (peft): only the adapter's weights train. `targets`:
    "all-linear" (every linear layer but the LM head) or comma-separated module names."""
    from peft import LoraConfig, get_peft_model

    modules = targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()]
    config = LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, lora_dropout=dropout, target_modules=modules,
                        task_type="CAUSAL_LM")  # fmt: skip
    return get_peft_model(model, config)


def merged_state_dict(weights: dict[str, torch.Tensor], model) -> dict[str, torch.Tensor]:
    """Hugging Face weights with the LoRA adapter folded in, W + scale * B @ A, from a peft model's
    (full) state dict; the model itself is not touched. Plain models' weights pass through."""
    if not hasattr(model, "peft_config"):
        return weights
    cfg = model.peft_config["default"]
    scale = cfg.lora_alpha / (math.sqrt(cfg.r) if cfg.use_rslora else cfg.r)
    prefix = "base_model.model."
    out = {}
    for name, w in weights.items():
        if ".lora_" in name:
            continue
        if name.endswith(".base_layer.weight"):
            module = name[: -len(".base_layer.weight")]
            a, b = weights[f"{module}.lora_A.default.weight"], weights[f"{module}.lora_B.default.weight"]
            w = (w.float() + scale * (b.float() @ a.float())).to(w.dtype)
            name = f"{module}.weight"
        out[name.replace(".base_layer.", ".").removeprefix(prefix)] = w
    return out


def enable_gradient_checkpointing(model) -> None:
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


def precision(mode: str, device, model) -> str:
    """`--autocast` resolved to "bf16" or "off". auto: bf16 on a GPU that supports it, and on a CPU
    with bf16 matrix units (cpu_has_bf16) for a model of at least BF16_MIN_PARAMETERS parameters;
    off otherwise (the tiny model keeps float32, where its numbers were measured)."""
    if mode != "auto":
        return mode
    kind = torch.device(device).type
    if kind == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "off"
    big = sum(p.numel() for p in model.parameters()) >= BF16_MIN_PARAMETERS
    return "bf16" if kind == "cpu" and big and cpu_has_bf16() else "off"


def autocast(device, mode: str):
    """The learner's and the HF backend's forward precision: `bf16` autocast or `off` (a run resolves
    `auto` with `precision` once its model is loaded; `auto` here means bf16 on a GPU that has it)."""
    kind = torch.device(device).type
    on = mode == "bf16" or (mode == "auto" and kind == "cuda" and torch.cuda.is_bf16_supported())
    return torch.autocast(kind, dtype=torch.bfloat16) if on else contextlib.nullcontext()


def is_sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def full_state_dict(model, rank0_only: bool = False) -> dict[str, torch.Tensor]:
    """The full, unsharded weights (a collective under FSDP: every rank must call it; they are
    gathered to CPU). `rank0_only`: other ranks get {} (when only rank 0 writes). An unsharded
    model's own state dict is returned as it is."""
    if not is_sharded(model):
        return getattr(model, "module", model).state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=rank0_only))


def hf_weights(model) -> dict[str, torch.Tensor]:
    """Full weights under their Hugging Face names, a LoRA adapter merged in: what an engine loads
    (a collective under FSDP)."""
    return merged_state_dict(full_state_dict(model), getattr(model, "module", model))
