"""Shared fixtures: a private model cache and the tiny model, built once per session."""

from __future__ import annotations

import os
import tempfile

import pytest

# Hermetic: never read or write the user's model cache; subprocesses inherit this.
os.environ.setdefault("TEXTRL_CACHE", tempfile.mkdtemp(prefix="textrl-test-cache-"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_path() -> str:
    from agents.model import resolve_model

    return resolve_model("tiny")


@pytest.fixture(scope="session")
def tiny(tiny_path):
    import torch

    from agents.model import load_model, load_tokenizer

    torch.manual_seed(0)
    return load_model(tiny_path, "cpu", torch.float32), load_tokenizer(tiny_path)


@pytest.fixture(scope="session")
def qwen_path() -> str:
    """The real-vocabulary profile (agents/profiles.py), built once per session."""
    from agents.model import resolve_model

    return resolve_model("tiny-qwen2.5")


@pytest.fixture(scope="session")
def qwen(qwen_path):
    import torch

    from agents.model import load_model, load_tokenizer

    return load_model(qwen_path, "cpu", torch.float32), load_tokenizer(qwen_path)


@pytest.fixture(scope="session")
def qwen_path() -> str:
    """The offline Qwen2.5-shaped profile (agents/profiles.py), built once into the private cache."""
    from agents.model import resolve_model

    return resolve_model("tiny-qwen2.5")


@pytest.fixture(scope="session")
def qwen(qwen_path):
    """(model, tokenizer) of the profile: 151,936 head rows (tied embeddings) for 151,665 tokens."""
    import torch

    from agents.model import load_model, load_tokenizer

    return load_model(qwen_path, "cpu", torch.float32), load_tokenizer(qwen_path)
