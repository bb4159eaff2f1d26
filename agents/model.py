"""Models and tokenizers by name: the built-in ones, built here on first use, or any Hugging Face causal LM.

`resolve_model` turns `--model` into a folder or hub id. `tiny` (the default, agents/tiny.py) and
the other built-in models (agents/profiles.py, agents/smollm2.py) are built once into a cache folder
and from then on loaded exactly like a hub model (`from_pretrained`), so the code path that serves
the tiny model also serves `--model Qwen/Qwen2.5-1.5B-Instruct` on a GPU. Also here: checking a
saved model's files and its tokenizer before a run trusts them (`check_model_dir`, `check_tokenizer`),
LoRA (loading an adapter checkpoint, wrapping a model in a fresh adapter) and the forward precision.
Getting full Hugging Face weights out of a LoRA or FSDP model is agents/weights.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from agents.profiles import PROFILES, profile_path
from agents.smollm2 import SMOLLM2, SourceError, build_smollm2, gguf_file
from agents.tiny import TINY, build_tiny_model, tiny_model_path
from envs.base import check_cache

BUILDERS = {**PROFILES, SMOLLM2: build_smollm2}  # the built-in models besides tiny: name -> build(path)
RANDOM_INIT = (TINY, *PROFILES)  # built-in models with random weights (SmolLM2 is pretrained)
PROBE = "go north"  # ordinary text every tokenizer must encode to real tokens and decode back
MARKER = re.compile(r"<\|[^<>|\s]+\|>")  # <|im_start|>, <|eot_id|>: tokens a chat template writes as text


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


def builtin_path(name: str) -> Path:
    """The cache folder a built-in model is built into (and loaded from)."""
    return tiny_model_path() if name == TINY else profile_path(name)


def resolve_model(name: str) -> str:
    """`tiny` or a profile -> the cached built-in model (built on first use); anything else unchanged.
    A cached folder is never built over: a damaged one is refused by `check_model_dir`, which says to delete it."""
    if not is_builtin(name):
        return os.path.expanduser(name) if is_local_path(name) else name
    path = builtin_path(name)
    if unbuilt(name):
        check_cache()  # one line now, not a traceback once the model is built, when the cache cannot take it
        (build_tiny_model if name == TINY else BUILDERS[name])(path)
    return str(path)


def unbuilt(name: str) -> bool:
    """A built-in model whose cache folder is missing or empty: `resolve_model` builds it into TEXTRL_CACHE."""
    path = builtin_path(name) if is_builtin(name) else None
    return path is not None and (not os.path.isdir(path) or not any(path.iterdir()))


def load_tokenizer(path: str, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """A chat model's tokenizer, padded on the left (batched generation appends on the right) and given a pad
    token if it ships without one. Raises ValueError (one line) when it does not load or fails
    `check_tokenizer` (a hub id's tokenizer is checked here, once downloaded; a folder's files before)."""
    tok = _tokenizer(path, trust_remote_code)
    check_tokenizer(tok, path, *_model_ids(path, trust_remote_code))
    return tok


def _tokenizer(path: str | os.PathLike, trust_remote_code: bool) -> PreTrainedTokenizerBase:
    # A folder's tokenizer that fails to load in any way is damaged; a hub id's OSError (not found, offline) is not.
    damaged = Exception if os.path.isdir(path) else (ValueError, KeyError)
    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except damaged as e:  # a tokenizer.json that is not JSON, a class transformers does not know, no vocabulary
        raise ValueError(f"{path}: the tokenizer does not load ({type(e).__name__}: {_first_line(e)})") from None
    tok.padding_side = "left"
    if tok.pad_token_id is None:  # many chat models ship without one
        tok.pad_token = tok.eos_token
    return tok


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _model_ids(path: str | os.PathLike, trust_remote_code: bool) -> tuple[int | None, list[tuple[str, int]]]:
    """The model's vocab_size and the EOS ids its config.json and generation_config.json name, (where, id),
    read from local files only (a LoRA adapter: its base's; a hub model's once downloaded, else (None, []))."""
    from transformers import AutoConfig, GenerationConfig

    try:
        source = adapter_base(str(path)) if is_adapter(str(path)) else path
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError, KeyError):  # not downloaded yet, or damaged (a folder's check names that)
        return None, []
    config = config.get_text_config()
    named = [("config.json", getattr(config, "eos_token_id", None))]
    with contextlib.suppress(OSError, ValueError):  # generation_config.json is optional
        generation = GenerationConfig.from_pretrained(source, local_files_only=True)
        named.append(("generation_config.json", generation.eos_token_id))
    eos = [(where, i) for where, ids in named for i in (ids if isinstance(ids, (list, tuple)) else [ids])]
    eos = [(where, i) for where, i in eos if i is not None]
    vocab = getattr(config, "vocab_size", None)
    return (vocab if isinstance(vocab, int) else None), eos


def check_tokenizer(tok: PreTrainedTokenizerBase, where: str | os.PathLike, vocab_size: int | None = None,
                    eos_ids: Iterable[tuple[str, int]] = ()) -> None:  # fmt: skip
    """Raise ValueError (one line, starting with `where`) unless the tokenizer works for this trainer: it
    encodes ordinary text (PROBE) to at least one non-special token and decodes it back, it has a chat
    template that renders a prompt, every special token the template writes is one known id, and it has an
    EOS. With the model's `vocab_size`: those ids and `eos_ids` ((file, id): the EOS ids the model's
    configs name) all have a row of the model's embeddings."""
    problem = _tokenizer_problem(tok, vocab_size, list(eos_ids))
    if problem:
        raise ValueError(f"{where}: {problem}")


def _tokenizer_problem(tok: PreTrainedTokenizerBase, vocab_size: int | None, eos_ids: list[tuple[str, int]]
                       ) -> str | None:  # fmt: skip
    """What `check_tokenizer` refuses, in words that start with what is wrong ("the tokenizer ..."), or None."""
    from agents.templates import PROMPT, USER

    special = set(tok.all_special_ids)
    ids = tok.encode(PROBE, add_special_tokens=False)
    if not set(ids) - special:
        known = f"its {len(tok)} special tokens" if len(tok) <= len(special) else f"{len(tok)} tokens"
        got = "to special tokens only" if ids else "to no tokens"
        return f'the tokenizer knows only {known} ("{PROBE}" encodes {got})'
    if (back := tok.decode(ids)).strip() != PROBE:  # a leading space (add_prefix_space) is no damage
        return f'the tokenizer does not decode "{PROBE}" back (it reads {back!r})'
    if not tok.chat_template:
        return ("the tokenizer has no chat template (chat_template.jinja, or in tokenizer_config.json); "
                "use an instruct model")  # fmt: skip
    text, error = None, None
    for messages in (PROMPT, PROMPT[1:]):  # a template that refuses a system message is noted by agents/templates.py
        try:
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            break
        except Exception as e:  # jinja's TemplateError, raise_exception in the template
            error = error or e
    if text is None or USER not in text:
        why = f"{type(error).__name__}: {_first_line(error)}" if error else "the user's message is not in the text"
        return f"the tokenizer's chat template does not render a prompt ({why})"
    if tok.eos_token_id is None:  # generation stops at it and the warm-up's targets end with it
        return "the tokenizer has no EOS token (eos_token in tokenizer_config.json)"
    named = [(f"the tokenizer's EOS {tok.eos_token}", tok.eos_token_id),
             (f"the tokenizer's pad token {tok.pad_token}", tok.pad_token_id)]  # fmt: skip
    tokens = {*tok.all_special_tokens, *(added.content for added in tok.added_tokens_decoder.values())}
    for token in sorted({t for t in tokens if t in text} | set(MARKER.findall(text))):
        pieces = tok.encode(token, add_special_tokens=False)
        if len(pieces) != 1 or (pieces[0] == tok.unk_token_id and token != tok.unk_token):
            return f"the tokenizer splits {token}, which its chat template writes, into {len(pieces)} tokens, not one"
        named.append((f"{token}, which the chat template writes,", pieces[0]))
    if vocab_size is None:
        return None
    named += [(f"the eos_token_id of {source}", i) for source, i in eos_ids]
    named.append((f'a token of "{PROBE}"', max(ids)))
    for what, i in named:
        if i is not None and not 0 <= i < vocab_size:
            return f"{what} is id {i}, outside the model's vocabulary (vocab_size {vocab_size} in config.json)"
    return None


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
    """Raise ValueError (one line, naming the folder or file) unless a saved model's files are whole:
    every JSON file parses, the config is one transformers reads, every safetensors file opens with a
    header that covers the file (a truncated one fails) and holds the tensors its index names, and the
    tokenizer is there (tokenizer.json, or the files its class builds from, and tokenizer_config.json)
    and passes `check_tokenizer` against the model's vocab_size and EOS ids (a LoRA adapter: its base's).
    Cheap: no tensor data is read; the tokenizer is loaded. A cached built-in model that fails is to be
    deleted, which the line says: it is rebuilt on next use."""
    try:
        _check_model_dir(Path(path), trust_remote_code)
    except ValueError as e:
        name = next((n for n in (TINY, *BUILDERS) if _same(path, builtin_path(n))), None)
        if name is None:
            raise
        raise ValueError(f"{e}; {path} is the cached built-in model {name}: delete it (rm -r {path}) and it is "
                         "rebuilt on next use") from None  # fmt: skip


def _same(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(b)


def _check_model_dir(path: Path, trust_remote_code: bool) -> None:
    from safetensors import safe_open
    from transformers import AutoConfig

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
            raise ValueError(f"{path / 'config.json'} is not a model config ({_first_line(e)})") from None
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
            raise ValueError(f"{f} is damaged ({_first_line(e)}; truncated?)") from None
        if not keys or not wanted.get(f.name, set()) <= keys:
            lacks = f"tensors named by {index.name} are missing" if keys else "no tensors"
            raise ValueError(f"{f} is damaged ({lacks})")
    _check_tokenizer_files(path, trust_remote_code)


def _check_tokenizer_files(path: Path, trust_remote_code: bool) -> None:
    """The tokenizer of a saved model folder (a LoRA adapter's too: this trainer saves it beside the
    adapter, and loads it from there): its files, then `check_tokenizer`. Raises ValueError (one line)."""
    have = {f.name for f in path.iterdir()}
    if not have & {"tokenizer.json", "tokenizer_config.json"}:
        where = "; an adapter's tokenizer is loaded from its own folder" if is_adapter(str(path)) else ""
        raise ValueError(f"{path} holds no tokenizer (no tokenizer.json or tokenizer_config.json{where})")
    try:
        tok = _tokenizer(path, trust_remote_code)
    except ValueError as e:
        if "tokenizer.json" in have:
            raise
        why = str(e).removeprefix(f"{path}: ")
        raise ValueError(f"{path / 'tokenizer.json'} is missing; without it {why}") from None
    vocab_size, eos_ids = _model_ids(path, trust_remote_code)
    problem = _tokenizer_problem(tok, vocab_size, eos_ids)
    if "tokenizer.json" not in have:  # the slow files its class builds from (vocab.json + merges.txt, tokenizer.model)
        needs = sorted(set(type(tok).vocab_files_names.values()) - {"tokenizer.json"})
        lacks = [name for name in needs if name not in have]
        if lacks or not needs:
            cls, subject = type(tok).__name__, "the tokenizer "
            if problem and problem.startswith(subject):
                problem = f"{subject}transformers builds without it {problem.removeprefix(subject)}"
            built = (f"; {problem}" if problem else
                     f", and so {'are' if len(lacks) > 1 else 'is'} {' + '.join(lacks)}, which {cls} would be "
                     "built from" if lacks else f" ({cls} is built from it alone)")  # fmt: skip
            raise ValueError(f"{path / 'tokenizer.json'} is missing{built}")
    if "tokenizer_config.json" not in have:  # the class, EOS and pad tokens: transformers falls back to defaults
        raise ValueError(f"{path / 'tokenizer_config.json'} is missing; without it transformers takes "
                         f"{type(tok).__name__}'s defaults (EOS {tok.eos_token})")  # fmt: skip
    if problem:
        raise ValueError(f"{path}: {problem}")


def adapter_base(path: str) -> str:
    """The base model an adapter checkpoint was trained on (recorded by peft)."""
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
