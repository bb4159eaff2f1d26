"""A run's memory stays flat: what it holds between iterations does not grow with the iterations.

Measured after each iteration's log, after a garbage collection: the bytes of every live tensor (weights,
optimizer moments, caches, held samples; each storage once) and the count of Python objects the collector
tracks (transcripts, samples, metrics). Peak RSS is not asserted here: it includes the allocator's free
space and varies with the machine (benchmarks/bench_cpu.py `--parts iteration` reports it)."""

import gc

import pytest
import torch

from algos.run import Run
from algos.train import main

ITERATIONS = 4  # measured on the tiny model (2026-12-07): window 8.41 MB and +26 objects from iteration 2 to 4,
# chat 19.6-20.2 MB (its kept KV caches follow the conversations' lengths) and +26 objects


def live_tensor_bytes() -> int:
    storages = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor) and not obj.is_meta:  # type(): no attribute read on proxies
            try:
                storage = obj.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
            except RuntimeError:  # no data of its own (a fake tensor left by another test's torch.compile)
                continue
    return sum(storages.values())


@pytest.mark.slow
@pytest.mark.parametrize("context", ["window", "chat"])
def test_live_memory_after_the_second_iteration_does_not_grow(tmp_path, monkeypatch, context):
    seen: list[tuple[int, int]] = []
    log = Run.log

    def measured(self, *args, **kwargs):
        out = log(self, *args, **kwargs)
        gc.collect()
        seen.append((live_tensor_bytes(), len(gc.get_objects())))
        return out

    monkeypatch.setattr(Run, "log", measured)
    args = ["--iterations", str(ITERATIONS), "--output-dir", str(tmp_path / "run"), "--context", context,
            "--num-groups", "2", "--group-size", "2", "--eval-episodes", "0", "--save-every", "0",
            "--sft-steps", "5", "--sft-episodes", "4", "--max-new-tokens", "8"]  # fmt: skip
    assert main(args) == 0
    assert len(seen) == ITERATIONS
    (tensors, objects), (last_tensors, last_objects) = seen[1], seen[-1]
    assert last_tensors <= tensors * 1.01 + 2**20, [t for t, _ in seen]  # 1 %, and 1 MiB of small buffers
    assert last_objects <= objects + 500, [o for _, o in seen]  # a kept transcript or sample list adds thousands
