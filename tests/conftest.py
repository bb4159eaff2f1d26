"""Shared fixtures: a private model cache and the tiny model, built once per session.

Under pytest-xdist (`-n auto --dist loadfile`, the README's test command) the cache is made once, in the
controller, and shared by the workers (models are built into it atomically); each worker gets an equal share
of the cores, and the files with the most slow tests are handed out first.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter

import pytest

# Hermetic: never read or write the user's model cache; subprocesses inherit this.
os.environ.setdefault("TEXTRL_CACHE", tempfile.mkdtemp(prefix="textrl-test-cache-"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# One OpenMP pool per worker sized to its share of the cores: pools that together outnumber the cores spin
# against each other (vLLM's CPU engine then ran about 8x slower beside another job). Subprocesses inherit it.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
if _WORKERS > 1:
    _threads = max(1, len(os.sched_getaffinity(0)) // _WORKERS)
    os.environ["OMP_NUM_THREADS"] = str(_threads)
    if "torch" in sys.modules:  # already imported (its pool already sized): resize it
        sys.modules["torch"].set_num_threads(_threads)


# The longest files, longest first (seconds in a --junitxml run, 2026-12-04: 361, 233, 222, then test_chat.py,
# about 200 alone, then 114, 104, 99, 83).
# Scheduling only: a stale list costs balance, never a result.
LONGEST = ("test_smollm2.py", "test_bench_smoke.py", "test_vllm.py", "test_chat.py", "test_real_vocab.py", "test_train.py",
           "test_bad_inputs.py", "test_workers.py")  # fmt: skip


def pytest_collection_modifyitems(items) -> None:
    """The longest files first, then those with more slow tests, each file's own order kept: with
    --dist loadfile a long file handed out last would leave the other workers idle at the end.
    Without xdist the order is unchanged."""
    if _WORKERS <= 1:
        return
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    first = {path: i for i, path in enumerate(dict.fromkeys(item.path for item in items))}

    def rank(item):
        name = item.path.name
        return (LONGEST.index(name) if name in LONGEST else len(LONGEST), -slow[item.path], first[item.path])

    items.sort(key=rank)


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
