"""torchrun data parallelism on CPU (gloo): one 2-rank update equals the one-process update.

tests/dist_worker.py runs every case on 2 ranks under torchrun; here each case is run again
in one process on all the samples, and the weights after two optimizer steps must agree.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

import dist_worker  # noqa: E402


def torchrun(args: list[str], nproc: int = 2, timeout: int = 600) -> subprocess.CompletedProcess:
    """Launch with torchrun; on a timeout the whole process group goes (ranks included), then it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"torchrun {' '.join(args)} hung for {timeout} s: {err[-2000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory, tiny_path):
    out = tmp_path_factory.mktemp("dist")
    proc = torchrun([str(ROOT / "tests" / "dist_worker.py"), str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name,parallel,options", dist_worker.CASES, ids=[c[0] for c in dist_worker.CASES])
def test_two_ranks_take_the_single_process_step(two_rank_results, name, parallel, options):
    got = torch.load(two_rank_results / f"{name}.pt", weights_only=True)
    want, want_stats = dist_worker.single_process(options)
    start = dist_worker.model().state_dict()
    moved = max(float((want[k] - start[k]).abs().max()) for k in want)
    assert moved > 2e-3  # the update did something
    assert set(got["weights"]) == set(want)
    for k in want:
        torch.testing.assert_close(got["weights"][k], want[k], rtol=1e-4, atol=1e-6, msg=k)
    for key in ("train/loss", "train/grad_norm", "train/clip_frac", "train/approx_kl", "train/entropy"):
        assert got["stats"][key] == pytest.approx(want_stats[key], rel=1e-4, abs=1e-6), key
    if options.get("beta"):
        assert got["stats"]["train/kl"] == pytest.approx(want_stats["train/kl"], rel=1e-4, abs=1e-7)


def test_share_splits_unevenly():
    data = list(range(14))
    assert dist_worker.share(data, 0, 2) == list(range(9)) and dist_worker.share(data, 1, 2) == list(range(9, 14))
