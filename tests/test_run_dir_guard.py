"""A run directory belongs to one run, and a checkpoint is checked before it is used: real runs, tiny.

A fresh run refuses a used --output-dir (--overwrite empties it), a second writer refuses a locked
one, a stale lock is taken over, a finished run's resume does nothing, a damaged newest checkpoint
falls back to the newest intact one, and a damaged --model folder is one line."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cold_start import COLD_UPDATES

from algos.checkpoint import check
from algos.config import ConfigError
from algos.run_lock import LOCK, RunLock
from algos.train import main as train_main
from scripts.evaluate import main as evaluate_main

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--num-groups", "2", "--group-size", "2", "--sft-steps", "2", "--sft-episodes", "2", "--eval-episodes", "0",
        "--max-new-tokens", "6", "--max-extra-groups", "0"]  # fmt: skip
DEAD_PID = 2**22 + 12345  # above Linux's pid_max (4194304): no process has it


def one_error(stderr: str) -> str:
    """The one `error:` line of a run's stderr (tqdm's progress output aside); no traceback."""
    lines = [line for line in re.split(r"[\r\n]", stderr) if line.strip()]
    assert not any("Traceback" in line for line in lines), stderr[-3000:]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def snapshot(run: Path) -> dict[str, bytes | None]:
    """Every path under the run directory, with the bytes of its logs."""
    return {str(p.relative_to(run)): p.read_bytes() if p.name.endswith(".jsonl") else None for p in run.rglob("*")}


def iterations(run: Path) -> list[int]:
    return [json.loads(line)["iteration"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A run of 2 iterations with checkpoints iter_0, iter_1 and iter_2 (copy it before changing it)."""
    run = tmp_path_factory.mktemp("guard") / "finished"
    assert train_main(["--iterations", "2", "--save-every", "1", *TINY, "--output-dir", str(run)]) == 0
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_0", "iter_1", "iter_2"]
    assert not (run / LOCK).exists()  # released at the end
    return run


def copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / run.name))


@pytest.mark.slow  # a training run
def test_a_fresh_run_refuses_a_used_output_dir_and_leaves_it_untouched(finished, capsys):
    before = snapshot(finished)
    assert train_main(["--iterations", "1", *TINY, "--output-dir", str(finished)]) == 2
    line = one_error(capsys.readouterr().err)
    assert f"--resume {finished}" in line and "--overwrite" in line
    assert snapshot(finished) == before


@pytest.mark.slow  # a training run
def test_overwrite_empties_the_run_dir_first(finished, tmp_path, capsys):
    run = copy(finished, tmp_path)
    assert train_main(["--iterations", "1", *TINY, "--sft-steps", "0", "--overwrite", "--output-dir", str(run)]) == 0
    assert f"--overwrite: emptied {run}" in capsys.readouterr().err
    assert iterations(run) == [1]  # the new run's rows only
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_1"]
    other = tmp_path / "notes"
    other.mkdir()
    (other / "thesis.tex").write_text("mine")
    assert train_main(["--iterations", "1", *TINY, "--overwrite", "--output-dir", str(other)]) == 2
    assert "holds files but no run" in one_error(capsys.readouterr().err)  # --overwrite empties only a run dir
    assert (other / "thesis.tex").read_text() == "mine"


def test_an_output_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "a-file"
    path.write_text("not a directory")
    for out in (path, path / "run"):
        assert train_main(["--iterations", "1", *TINY, "--output-dir", str(out)]) == 2
        assert "is a file" in one_error(capsys.readouterr().err)
    assert path.read_text() == "not a directory"


@pytest.mark.slow  # a training run
def test_resuming_a_finished_run_does_nothing_unless_iterations_extends_it(finished, tmp_path, capsys):
    run = copy(finished, tmp_path)
    before = snapshot(run)
    assert train_main(["--resume", str(run)]) == 0
    err = capsys.readouterr().err
    assert "is finished" in err and "--iterations" in err and len(err.strip().splitlines()) == 1, err
    assert snapshot(run) == before  # metrics.jsonl and transcripts.jsonl bytes unchanged, nothing written
    assert train_main(["--resume", str(run), "--iterations", "3"]) == 0
    assert "resuming after iteration 2" in capsys.readouterr().err
    assert iterations(run) == [0, 1, 2, 3]


@pytest.mark.slow  # a training run
def test_a_stale_lock_is_taken_over_with_a_note(finished, tmp_path, capsys):
    run = copy(finished, tmp_path)
    (run / LOCK).write_text(json.dumps({"pid": DEAD_PID, "host": socket.gethostname()}))
    assert train_main(["--resume", str(run)]) == 0  # finished: taken over, then released
    err = capsys.readouterr().err
    assert f"took over the stale lock of pid {DEAD_PID}" in err and "is finished" in err
    assert not (run / LOCK).exists()


def test_a_held_lock_refuses_a_second_taker_naming_its_holder(tmp_path, capfd):
    lock = RunLock.take(tmp_path / "run")
    assert json.loads((tmp_path / "run" / LOCK).read_text())["pid"] == os.getpid()
    with pytest.raises(ConfigError, match=f"pid {os.getpid()} on host {socket.gethostname()}"):
        RunLock.take(tmp_path / "run", tries=2)
    lock.release()
    lock.release()  # twice is fine
    assert not (tmp_path / "run" / LOCK).exists()
    RunLock.take(tmp_path / "run").release()
    assert "took over" not in capfd.readouterr().err  # a released lock leaves nothing stale behind


@pytest.mark.slow  # a training run
def test_a_second_writer_refuses_while_the_first_runs_and_the_first_finishes(tmp_path):
    """The fault test: `--resume` on a run that is alive refuses (its lock), and the run is not disturbed."""
    run, log = tmp_path / "live", open(tmp_path / "first.log", "w")  # noqa: SIM115 (closed below)
    # COLD_UPDATES: its updates run, which keeps the first run alive while the second is refused
    first = subprocess.Popen([sys.executable, "-m", "algos.train", "--iterations", "4", "--save-every", "1", *TINY,
                              *COLD_UPDATES, "--output-dir", str(run)], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=log)  # fmt: skip
    deadline = time.time() + 300
    while not (run / "checkpoints" / "iter_0" / "trainer_state.pt").exists():  # a resume would have a checkpoint
        assert first.poll() is None and time.time() < deadline, "the first run ended before its warm-up checkpoint"
        time.sleep(0.05)
    second = subprocess.run([sys.executable, "-m", "algos.train", "--resume", str(run)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert first.poll() is None, "the first run ended before the second was refused: make it longer"
    assert second.returncode == 2
    line = one_error(second.stderr)
    assert f"pid {first.pid} on host {socket.gethostname()}" in line and "in use" in line
    first.wait(timeout=600)
    log.close()
    assert first.returncode == 0, (tmp_path / "first.log").read_text()[-3000:]
    assert iterations(run) == [0, 1, 2, 3, 4]  # every iteration once: nobody else wrote
    assert not (run / LOCK).exists()


@pytest.mark.slow  # a training run
@pytest.mark.parametrize("damaged", ["trainer_state.pt", "model.safetensors"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_newest_intact_one(finished, tmp_path, capsys, damaged):
    run = copy(finished, tmp_path)
    target = run / "checkpoints" / "iter_2" / damaged
    with open(target, "r+b") as f:  # cut as a full disk or a torn copy would leave it
        f.truncate(target.stat().st_size // 2)
    assert train_main(["--resume", str(run)]) == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "newest intact" in x)
    assert line.startswith("resuming from iter_1, the newest intact checkpoint; skipped iter_2:") and damaged in line
    assert iterations(run) == [0, 1, 2]  # cut back to iteration 1, iteration 2 trained again
    check(run / "checkpoints" / "iter_2")  # written afresh


@pytest.mark.slow  # a training run
def test_no_intact_checkpoint_is_one_line(finished, tmp_path, capsys):
    run = copy(finished, tmp_path)
    for state in (run / "checkpoints").glob("iter_*/trainer_state.pt"):
        state.write_bytes(state.read_bytes()[:100])
    before = snapshot(run)
    assert train_main(["--resume", str(run), "--iterations", "3"]) == 2
    assert "no intact checkpoint" in one_error(capsys.readouterr().err)
    assert snapshot(run) == before


@pytest.mark.slow  # a training run
@pytest.mark.parametrize("damage", ["config.json", "model.safetensors", "trainer_state.pt"])
def test_a_damaged_model_folder_is_one_line(finished, tmp_path, capsys, damage):
    model = Path(shutil.copytree(finished / "checkpoints" / "iter_2", tmp_path / "model"))
    if damage == "config.json":
        (model / damage).write_text('{"model_type": "qwen2", "hidden_')
    else:
        (model / damage).write_bytes((model / damage).read_bytes()[:1000])
    out = tmp_path / "run"
    assert train_main(["--model", str(model), "--iterations", "1", *TINY, "--output-dir", str(out)]) == 2
    assert damage in one_error(capsys.readouterr().err)
    assert not out.exists()  # refused before anything was written
    report = tmp_path / "eval" / "report.json"
    assert evaluate_main(["--checkpoint", str(model), "--episodes", "1", "--output", str(report)]) == 2
    assert damage in one_error(capsys.readouterr().err)
    assert not report.exists()
