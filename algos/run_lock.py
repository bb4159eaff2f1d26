"""One run per run directory: the output-dir checks and the lock that keeps a second writer out.

    check_output_dir(path, resume, overwrite)   before anything loads: a file, not creatable or writable
                                                (a probe file), in use, or a fresh run into a used
                                                directory -> ConfigError
    RunLock.take(path)                          DIR/.lock, held until release() (rank 0 only)

The lock is DIR/.lock, a JSON record of the writer's pid, host and start time, held with an
exclusive `flock` for as long as the run lives. The kernel drops a flock when its process dies,
however it dies (kill -9 too), so a lock file whose flock is free is stale: the next run takes it
over with a note. A lock written on another host is never taken over (a flock on a shared
filesystem may be local to each host): the message says to delete it once that run is gone. Where
the filesystem has no flock, a lock file on this host is stale when its pid is not running.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

from algos.config import ConfigError
from algos.run_dir import LONGEST_PATH
from envs.base import storage_problem

LOCK = ".lock"
RUN_FILES = ("config.yaml", "metrics.jsonl", "checkpoints")  # what marks a folder as a run directory
RUNS = "runs"  # where a run without --output-dir makes its folder (algos/resolve.py)


def _flock(fd: int, mode: int) -> bool | None:
    """True: locked; False: another process holds it; None: this filesystem has no flock."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return None
        raise


def _record(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        record = json.loads(os.read(fd, 4096) or b"{}")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _running(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError, TypeError):
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _holder_text(record: dict) -> str:
    started = f", started {record['started']}" if record.get("started") else ""
    return f"pid {record.get('pid', '?')} on host {record.get('host', '?')}{started}"


def holder(run_dir: Path) -> dict | None:
    """The record of the live process that holds `run_dir`'s lock, else None (no lock, or a stale one)."""
    path = Path(run_dir) / LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # no lock (or none this process may read: taking it will say so)
        return None
    try:
        record, got = _record(fd), _flock(fd, fcntl.LOCK_SH)
        if got:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        if got is None:  # no flock here: judge by the pid
            live = record.get("host") != socket.gethostname() or _running(record.get("pid"))
            return record if record and live else None
        return record
    finally:
        os.close(fd)


def _in_use(run_dir: Path, record: dict) -> ConfigError:
    return ConfigError(f"{run_dir} is in use: {_holder_text(record)} is writing to it ({run_dir / LOCK}); "
                       "wait for that run to end, or pick another --output-dir")  # fmt: skip


def check_output_dir(output_dir: str, resume: bool, overwrite: bool) -> None:
    """Whether a run may write into --output-dir (empty: a new timestamped one under runs/). Raises ConfigError
    when it cannot take files (a file, not creatable, not writable, no room for the checkpoints' paths; a
    resume: the same for its checkpoints/), when a live run holds it, or, for a fresh run, when it holds
    files: a run (without --overwrite) or anything else (--overwrite empties only a run directory)."""
    path = Path(output_dir or RUNS).expanduser()
    setting = "--output-dir" if output_dir else f"--output-dir (unset: a new folder in {RUNS})"
    if problem := storage_problem(path, setting, LONGEST_PATH if output_dir else ""):
        raise ConfigError(f"{problem}; pick another --output-dir")
    if not output_dir:
        return
    checkpoints = path / "checkpoints"
    if resume and os.path.lexists(checkpoints) and (problem := storage_problem(checkpoints, f"--resume {output_dir}:")):
        raise ConfigError(problem)  # the next checkpoint goes there
    record = holder(path)
    if record is not None:
        raise _in_use(path, record)
    if resume or not path.is_dir():
        return
    entries = sorted(p.name for p in path.iterdir() if p.name != LOCK)  # a stale lock alone is taken over
    if not entries:
        return
    run_files = [name for name in RUN_FILES if (path / name).exists()]
    if not run_files:  # --overwrite empties only a run directory
        shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
        raise ConfigError(f"--output-dir {output_dir} holds files but no run ({shown}); pick a new or empty "
                          "--output-dir")  # fmt: skip
    if not overwrite:
        raise ConfigError(f"--output-dir {output_dir} already holds a run ({', '.join(run_files)}); continue "
                          f"it with --resume {output_dir}, start over in it with --overwrite, or pick a new "
                          "--output-dir")  # fmt: skip


class RunLock:
    """DIR/.lock, held (flock) from `take` until `release`."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path, self.fd = path, fd

    @classmethod
    def take(cls, run_dir: str | Path, tries: int = 20) -> RunLock:
        """Create `run_dir` if needed and lock it; a stale lock is taken over with a note. Raises
        ConfigError when a live process holds it, or a lock from another host is in the way."""
        run_dir = Path(run_dir)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"--output-dir {run_dir}: cannot create it ({e.strerror})") from None
        path, host = run_dir / LOCK, socket.gethostname()
        for attempt in range(tries):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise ConfigError(f"--output-dir {run_dir} is not writable: {path} ({e.strerror})") from None
            got = _flock(fd, fcntl.LOCK_EX)
            if got and not _same_file(fd, path):  # its holder removed it on release meanwhile: open anew
                os.close(fd)
                continue
            record = _record(fd)
            if got is False or (got is None and record and record.get("host") == host and _running(record.get("pid"))):
                os.close(fd)
                if attempt + 1 < tries:  # a check (`holder`) may hold it for an instant
                    time.sleep(0.05)
                    continue
                raise _in_use(run_dir, record)
            if record and record.get("host") != host:
                os.close(fd)
                raise ConfigError(f"{run_dir} is locked by {_holder_text(record)} ({path}); if that run is no "
                                  f"longer running, delete {path} and start again")  # fmt: skip
            mine = {"pid": os.getpid(), "host": host, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, (json.dumps(mine) + "\n").encode())
            os.fsync(fd)
            if record:  # a lock nobody holds: its run died (kill -9, a crash, a reboot)
                print(f"took over the stale lock of {_holder_text(record)} ({path}): that run is gone", file=sys.stderr)
            return cls(path, fd)
        raise ConfigError(f"could not lock {path}; another run keeps taking it")

    def empty(self) -> int:
        """Remove everything in the run directory but the lock (--overwrite); the number of entries removed."""
        removed = 0
        for entry in self.path.parent.iterdir():
            if entry.name == LOCK:
                continue
            try:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            except OSError as e:
                raise ConfigError(f"--overwrite: cannot remove {entry} ({e.strerror})") from None
            removed += 1
        return removed

    def release(self) -> None:
        """Remove the lock file (still ours) and drop the flock; safe to call twice."""
        if self.fd is None:
            return
        if _same_file(self.fd, self.path):
            self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` is still the file open as `fd` (a holder removes it on release)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False
