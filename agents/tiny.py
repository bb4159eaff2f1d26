"""The tiny local default model, `--model tiny`: a small Qwen2-architecture causal LM and its tokenizer.

`build_tiny_model` builds, once, the model from a config with random weights and a byte-level BPE
tokenizer trained with `tokenizers` on text from the built-in envs and a committed sample of
TextWorld text (agents/data, made by scripts/tw_corpus.py), with a ChatML chat template. Both are
saved with `save_pretrained` into a cache folder (`tiny_model_path`); agents/model.py
`resolve_model` builds it on first use, and from then on it loads exactly like a hub model. Nothing
is downloaded.

Why these sizes: 4 layers, hidden 128 and 4 heads give head_dim 32 (vLLM's CPU attention
kernels need >= 32); ~1M parameters keep a CPU iteration in seconds. Its embeddings are untied;
the real-vocabulary profile `--model tiny-qwen2.5` (agents/profiles.py) has tied ones, as
Qwen2.5-0.5B/1.5B and Llama-3.2 do, and the tests sync it into vLLM in place exactly.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedTokenizerFast

from agents.profiles import save_atomically
from envs.base import cache_dir

if TYPE_CHECKING:
    import gymnasium as gym

    from agents.prompt import PromptBuilder

TINY = "tiny"
TINY_VERSION = "v2"  # part of the cache folder's name: bump it when the build changes, so old builds are not reused
TEXTWORLD_CORPUS = Path(__file__).parent / "data" / "textworld_corpus.txt"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAGS = ["<think>", "</think>", "<action>", "</action>"]


def tiny_model_path() -> Path:
    """The cache folder the tiny model is built into (and loaded from)."""
    return cache_dir() / f"tiny-qwen2-{TINY_VERSION}"


def corpus_steps(
    env: gym.Env, seed: int, builder: PromptBuilder, rng: random.Random, max_steps: int
) -> Iterator[tuple[list[dict[str, str]], str]]:
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
    """A byte-level BPE tokenizer trained on `env_corpus`, with the ChatML template and one token per tag."""
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
