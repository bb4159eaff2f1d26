"""Exact resume: a run killed with SIGKILL mid-checkpoint-write (past its last published checkpoint,
with metrics and transcripts logged beyond it) resumes with --resume and logs the same metrics as a
run that was never interrupted."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from algos.train import main

pytestmark = pytest.mark.slow  # every test here trains in a subprocess

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["--iterations", "3", "--save-every", "1", "--num-groups", "2", "--group-size", "4", "--sft-steps", "4",
         "--sft-episodes", "4", "--eval-episodes", "4", "--eval-every", "2", "--max-new-tokens", "8",
         "--max-extra-groups", "1", "--seed", "5", "--transcripts", "1"]  # fmt: skip
# In the child: SIGKILL itself at the rename that would publish checkpoint iter_3 (files written, not yet visible).
DIE_AT_ITER_3 = """
import os, signal, sys
real = os.replace
def replace(src, dst):
    if str(dst).endswith("iter_3"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst)
os.replace = replace
from algos.train import main
sys.exit(main(sys.argv[1:]))
"""


def train(*args, **kw) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "algos.train", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, **kw)


def metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))} for r in rows]  # measured, not computed


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("resume") / "whole"
    assert train(*FLAGS, "--output-dir", str(run)).returncode == 0
    return run


def test_sigkill_mid_checkpoint_write_then_resume_matches_an_uninterrupted_run(uninterrupted, tmp_path):
    """Killed at the worst moment: iteration 3's metrics and transcripts are written, its checkpoint is
    not yet published. The previous checkpoint still loads, the torn write is removed, and the resumed
    run logs every iteration once with the numbers of a run that was never interrupted."""
    run = tmp_path / "torn"
    died = subprocess.run([sys.executable, "-c", DIE_AT_ITER_3, *FLAGS, "--output-dir", str(run)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert died.returncode == -signal.SIGKILL
    assert list((run / "checkpoints").glob(".iter_3.tmp-*"))  # the write that never completed
    assert not (run / "checkpoints" / "iter_3").exists()
    assert 3 in [r["iteration"] for r in metrics(run)]  # logged past the last checkpoint: resume must rewrite it
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(run / "checkpoints" / "iter_2")  # the previous one still loads
    resumed = train("--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming after iteration 2" in resumed.stderr
    assert "removed an unfinished checkpoint write" in resumed.stderr
    assert not list((run / "checkpoints").glob(".iter_*"))
    assert metrics(run) == metrics(uninterrupted)  # every iteration once, the same numbers
    transcripts = [json.loads(line)["iteration"] for line in (run / "transcripts.jsonl").read_text().splitlines()]
    assert transcripts == sorted(transcripts) and len(transcripts) == len(set(transcripts))


def test_resume_without_a_checkpoint_or_a_run_is_one_line(tmp_path, capsys):
    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    (empty / "config.yaml").write_text("env: KeyDoor-v0\n")
    for args, needle in ((["--resume", str(empty)], "no complete checkpoint"),
                         (["--resume", str(tmp_path / "nope")], "needs a run directory")):  # fmt: skip
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and err.count("\n") == 0, err


def test_keep_checkpoints_prunes_old_ones(tmp_path):
    run = tmp_path / "kept"
    flags = [*FLAGS[2:], "--iterations", "2", "--keep-checkpoints", "1", "--eval-episodes", "0"]
    assert train(*flags, "--output-dir", str(run)).returncode == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_0", "iter_2"]
