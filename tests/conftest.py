"""Shared fixtures: a private model cache and the tiny model, built once per session."""

from __future__ import annotations

import os
import tempfile

import pytest

# Hermetic: never read or write the user's model cache; subprocesses inherit this.
os.environ.setdefault("TEXTRL_CACHE", tempfile.mkdtemp(prefix="textrl-test-cache-"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _built(name: str) -> str:
    from agents.model import resolve_model

    return resolve_model(name)


def _loaded(path: str):
    import torch

    from agents.model import load_model, load_tokenizer

    torch.manual_seed(0)
    return load_model(path, "cpu", torch.float32), load_tokenizer(path)


@pytest.fixture(scope="session")
def tiny_path() -> str:
    return _built("tiny")


@pytest.fixture(scope="session")
def tiny(tiny_path):
    return _loaded(tiny_path)


@pytest.fixture(scope="session")
def qwen_path() -> str:
    """The real-vocabulary profile `tiny-qwen2.5` (agents/profiles.py), built once per session."""
    return _built("tiny-qwen2.5")


@pytest.fixture(scope="session")
def qwen(qwen_path):
    return _loaded(qwen_path)


@pytest.fixture(scope="session")
def smollm2_path() -> str:
    """The real pretrained model `smollm2-135m-instruct` (agents/smollm2.py), converted once per session."""
    return _built("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def smollm2(smollm2_path):
    return _loaded(smollm2_path)
