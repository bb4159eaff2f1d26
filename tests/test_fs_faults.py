"""A filesystem fault in the cache, the run directory or a checkpoint is one line and exit 2, found before work.

Table-driven: each place (TEXTRL_CACHE for a built-in model and for TextWorld games, --output-dir, a resumed
run's checkpoints/) x each fault (read-only, not creatable, a file where a folder should be, a name too long,
a full disk) through `algos.train.main`: exit 2, one `error:` line naming the setting, the path and the reason,
every file that was there before untouched and no folder left behind; the same for scripts.evaluate --output. Then a full disk while a checkpoint or a built model is being
written, at the save itself: one line, the partial folder removed, the earlier checkpoints intact.

Tests may run as root, whom chmod does not stop: there a read-only folder (and, for everyone, a full disk) is
simulated by making os.open (for writing) and os.mkdir raise the fault's errno for any path under it, which is
what the kernel does for such a folder; a non-root user also gets the real chmod 555.
"""

import errno
import os
from pathlib import Path

import pytest
import torch
import yaml
from test_run_dir_guard import one_error

import algos.run_dir as run_dir
from agents.profiles import save_atomically
from algos.config import Config, flat
from algos.run_dir import LONGEST_PATH, RunDir
from algos.train import main as train_main
from envs.base import StorageError
from scripts.evaluate import main as evaluate_main

PLACES = ("model cache", "games cache", "output dir", "checkpoints")
FAULTS = ("read-only", "not creatable", "a file", "too long", "full")
REASONS = {"read-only": os.strerror(errno.EACCES), "not creatable": os.strerror(errno.ENOENT),
           "a file": "is a file, not a folder", "too long": os.strerror(errno.ENAMETOOLONG),
           "full": os.strerror(errno.ENOSPC)}  # fmt: skip
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT


def deny(monkeypatch, folder: Path, code: int) -> None:
    """Writes under `folder` fail with `code` (see the module docstring); the folder holds a file to keep."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "keep.txt").write_text("mine")
    inside = str(folder)

    def under(path) -> bool:
        if isinstance(path, int):  # a file descriptor
            return False
        path = os.path.abspath(os.fspath(path))
        return path == inside or path.startswith(inside + os.sep)

    def fail(path):
        raise OSError(code, os.strerror(code), str(path))

    real_open, real_mkdir = os.open, os.mkdir
    monkeypatch.setattr(os, "open", lambda path, flags, *a, **k: fail(path) if flags & WRITE and under(path)
                        else real_open(path, flags, *a, **k))  # fmt: skip
    monkeypatch.setattr(os, "mkdir", lambda path, *a, **k: fail(path) if under(path) else real_mkdir(path, *a, **k))
    if code == errno.EACCES and os.geteuid() != 0:  # the real thing too, where it binds
        folder.chmod(0o555)


def fault_at(fault: str, base: Path, monkeypatch) -> Path:
    """A folder path under `base` (or in /proc) where writing fails with `fault`."""
    if fault in ("read-only", "full"):
        deny(monkeypatch, base / "denied", errno.EACCES if fault == "read-only" else errno.ENOSPC)
        return base / "denied"
    if fault == "not creatable":
        return Path(f"/proc/textrl-test-{os.getpid()}")  # nothing can be made in /proc
    if fault == "a file":
        (base / "a-file").write_text("mine")
        return base / "a-file"
    return base / ("x" * 300)  # one name over the 255 bytes a filesystem allows


def long_dir(base: Path) -> Path:
    """A folder path short enough to create, too long for the checkpoints' paths under it (Linux: 4096 bytes)."""
    target, out = 4096 - len(LONGEST_PATH) + 10, str(base)
    while len(out) < target:
        out += "/" + "d" * min(200, max(1, target - len(out) - 1))
    return Path(out)


def fake_run(path: Path) -> Path:
    """A run directory --resume accepts as far as its checks: config.yaml and a checkpoint's file."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(flat(Config(output_dir=str(path))), sort_keys=False))
    return path


def files(root: Path) -> dict[str, bytes | None]:
    """Every path under `root`, with the bytes of its files."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() and not p.is_symlink() else None
            for p in root.rglob("*")}  # fmt: skip


@pytest.fixture
def restore_modes(tmp_path):
    yield
    for p in tmp_path.rglob("*"):  # chmod 555 would stop pytest removing tmp_path
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("place", PLACES)
def test_a_filesystem_fault_is_one_line_and_exit_2(place, fault, tmp_path, monkeypatch, capsys, tiny_path,
                                                   restore_modes):  # fmt: skip
    argv = ["--iterations", "1", "--eval-episodes", "0"]
    if place in ("model cache", "games cache"):
        cache = fault_at(fault, tmp_path, monkeypatch)
        monkeypatch.setenv("TEXTRL_CACHE", str(cache))
        if place == "games cache":  # a model built elsewhere; the env generates its games into the cache
            argv += ["--model", tiny_path, "--env", "TextWorld-CoinCollector-v0", "--env-kwargs", "num_games", "2"]
        argv += ["--output-dir", str(tmp_path / "run")]
        words = ["TEXTRL_CACHE", str(cache)]
    elif place == "output dir":
        out = fault_at(fault, tmp_path, monkeypatch)
        argv += ["--output-dir", str(out)]
        words = ["--output-dir", str(out)]
    else:  # a resumed run's checkpoints/; a fresh run's is only too long when its --output-dir is
        run = fake_run(tmp_path / "run")
        checkpoints = run / "checkpoints"
        if fault in ("read-only", "full"):
            deny(monkeypatch, checkpoints, errno.EACCES if fault == "read-only" else errno.ENOSPC)
        elif fault == "not creatable":  # a link to a disk that is not there
            checkpoints.symlink_to(f"/proc/textrl-test-{os.getpid()}/checkpoints")
        elif fault == "a file":
            checkpoints.write_text("mine")
        if fault == "too long":
            out = long_dir(tmp_path)
            argv += ["--output-dir", str(out)]
            words = ["--output-dir", str(out), "the files under it would have paths"]
        else:
            argv = ["--resume", str(run)]
            words = ["--resume", str(checkpoints)]
    before = files(tmp_path)
    assert train_main(argv) == 2
    line = one_error(capsys.readouterr().err)
    reason = "links to" if (place, fault) == ("checkpoints", "not creatable") else REASONS[fault]
    for word in [*words, reason]:
        assert word in line, (word, line)
    assert files(tmp_path) == before  # nothing lost, nothing half-written, no folder left by the check


@pytest.mark.parametrize("fault", FAULTS)
def test_the_evaluation_reports_folder_is_checked_before_anything_loads(fault, tmp_path, monkeypatch, capsys,
                                                                        restore_modes):  # fmt: skip
    folder = fault_at(fault, tmp_path, monkeypatch)
    before = files(tmp_path)
    assert evaluate_main(["--checkpoint", "no-such-checkpoint", "--output", str(folder / "report.json")]) == 2
    line = one_error(capsys.readouterr().err)
    for word in ["--output", str(folder), REASONS[fault]]:
        assert word in line, (word, line)
    assert files(tmp_path) == before


def test_a_read_only_folder_is_refused_without_a_simulation_too(tmp_path, capsys, restore_modes):
    """The real chmod 555, where it binds (not as root)."""
    if os.geteuid() == 0:
        pytest.skip("root writes through chmod 555; the table simulates it")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    assert train_main(["--iterations", "1", "--output-dir", str(ro / "run")]) == 2
    assert os.strerror(errno.EACCES) in one_error(capsys.readouterr().err)


# ---- a full disk while saving -----------------------------------------------------------------------------
def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def torch_full(obj, path, *args, **kwargs):
    """What torch.save raises on a full disk: a RuntimeError without the errno, after part of the file."""
    Path(path).write_bytes(b"partial")
    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")


@pytest.mark.parametrize("how", ["OSError", "torch.save's own error", "less free space than the tensors"])
def test_a_full_disk_on_save_is_one_line_and_keeps_the_earlier_checkpoints(how, tiny, tmp_path, monkeypatch):
    model, tokenizer = tiny
    run = RunDir(tmp_path / "run", {"report_to": "none"})
    run.save_checkpoint(1, model, tokenizer, {"iteration": 1})
    before = files(run.path / "checkpoints")
    if how == "OSError":
        monkeypatch.setattr(torch, "save", no_space)
    elif how == "torch.save's own error":
        monkeypatch.setattr(torch, "save", torch_full)
        monkeypatch.setattr(run_dir, "_free_bytes", lambda path: 0 if any(Path(path).glob(".iter_2.tmp-*")) else 2**40)
    else:
        monkeypatch.setattr(run_dir, "_free_bytes", lambda path: 2**20)  # the tiny model's weights: 4 MiB
    with pytest.raises(StorageError) as raised:
        run.save_checkpoint(2, model, tokenizer, {"iteration": 2})
    line = str(raised.value)
    assert "\n" not in line and os.strerror(errno.ENOSPC) in line and "checkpoints/iter_2" in line, line
    assert f"--resume {run.path}" in line
    assert files(run.path / "checkpoints") == before  # iter_1 as it was, no .iter_2.tmp-* left
    assert sorted(p.name for p in (run.path / "checkpoints").iterdir()) == ["iter_1"]
    run.close()


def test_a_write_error_that_is_not_the_disk_is_raised_as_it_is(tiny, tmp_path, monkeypatch):
    """Not every failure is a full disk: a library's own error keeps its traceback (the temp folder still goes)."""
    model, tokenizer = tiny
    run = RunDir(tmp_path / "run", {"report_to": "none"})
    monkeypatch.setattr(torch, "save", torch_full)  # the disk has room: a bug, not a fault of the filesystem
    with pytest.raises(RuntimeError, match="inline_container"):
        run.save_checkpoint(1, model, tokenizer, {"iteration": 1})
    assert list((run.path / "checkpoints").iterdir()) == []
    run.close()


class Stub:
    """A model or tokenizer whose save writes part of a file, then fails as `error` says."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def save_pretrained(self, folder, **kwargs) -> None:
        (Path(folder) / "model.safetensors").write_bytes(b"partial")
        if self.error:
            raise self.error


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
                                   Exception("Error while serializing: I/O error: No space left on device (os error 28)")],
                         ids=["OSError", "safetensors"])  # fmt: skip
def test_a_full_disk_while_building_a_model_is_one_line_and_leaves_nothing(error, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "keep.txt").write_text("mine")
    with pytest.raises(StorageError) as raised:
        save_atomically(cache / "tiny-qwen2-v2", Stub(error), Stub(None))
    line = str(raised.value)
    assert "\n" not in line and "TEXTRL_CACHE" in line and os.strerror(errno.ENOSPC) in line, line
    assert sorted(p.name for p in cache.iterdir()) == ["keep.txt"]  # no half-built model, no temp folder
