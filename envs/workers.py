"""Env workers: where the collector's envs live and how a lockstep round of calls reaches them.

    python -m algos.train --env TextWorld-CoinCollector-v0 --env-workers 2
    python -m algos.train --env TextWorld-Cooking-v0 --env-isolation        # one worker per env
    python -m algos.train --env ... --env-workers 32 --env-backend ray --ray-address auto

A pool holds envs 0..n-1 and runs one round at a time: `pool.run(calls)` takes (env, "reset" |
"step", argument) for some of its envs and returns one `(status, value)` per call, "ok" with what
the env returned or "error" with why not. Three pools, one contract:

- `LocalPool` (`--env-workers 0`, the default): every env in the trainer's process, called one
  after another.
- `ProcessPool` (`--env-workers N`): env i lives in worker process i % N. A round sends each
  worker its calls at once, so the workers step in parallel; each answers call by call.
- `RayPool` (`--env-backend ray`): the same workers as Ray actors, which may sit on other
  machines of a Ray cluster (the `ray` extra; docs/scaling.md).

Every worker is a `Host`: it makes its envs on first use and runs each call under the step
timeout (a SIGALRM timer in its main thread). A call that raises or runs out of time is that
env's error only: the env is closed and made afresh on its next call. What the timer cannot cut
(native code that never returns to Python) or survive (a segfault, `os._exit`), the pool handles
from outside: a worker that does not answer within twice the timeout (at most the timeout plus
`IPC_SLACK`) is killed, a
worker that dies is restarted, and every episode it was running ends with an error. A pool of
one worker per env (`--env-isolation`) is the strictest case: a crash costs one episode.

What is identical across pools: the calls each env receives and, for envs that depend only on
their reset seed and actions (every built-in env), every observation, reward and info, so a
fixed-seed run gives the same trajectories in-process and with workers (tests/test_workers.py).
What is not: wall time, and which other envs a crash takes with it (its worker's).

Worker processes start with `python -m envs.workers` (not multiprocessing's spawn, which would
import the trainer's main module, torch included, into every worker) and see the trainer's
`sys.path`, so `pkg:Env-v0` ids import in them as in the trainer. An env class registered only
inside the trainer's process (`gym.register` in a script) cannot be made in a worker.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import gymnasium as gym

from envs.base import at_least, choose

BACKENDS = ("process", "ray")
IPC_SLACK = 5.0  # at most this many seconds (and at most the step timeout) beyond the timeout for an answer to come back
MAKE_TIMEOUT = 600.0  # making an env may generate games (TextWorld): allowed longer than a step

Call = tuple[int, str, Any]  # (env index, "reset" | "step" | "make" | "describe" | "ping", argument)
Outcome = tuple[str, Any]  # ("ok", what the env returned) or ("error", why not)


@dataclass(frozen=True)
class WorkerConfig:
    """Where envs run (the collector's, evaluation's and the warm-up's) and how long a call may take."""

    env_step_timeout: float = 60.0
    """Seconds an env call may take; a slower one (or one that raises) ends its episode as truncated,
    counted in rollout/env_errors, and the env is made afresh (0 = no limit)."""
    env_workers: int = 0
    """Worker processes the envs are spread over; each lockstep round steps them all in parallel
    (0 = every env in the trainer's process). A worker that crashes or hangs is restarted and only its
    running episodes end (truncated, counted in rollout/env_errors). Sizing: docs/scaling.md."""
    env_isolation: bool = False
    """One worker per env: a hang in native code or a crash costs one episode, not the run (the
    strictest --env-workers; for game interpreters such as TextWorld's)."""
    env_backend: str = "process"
    """process (worker processes on this machine) or ray (Ray actors, on any machine of a Ray
    cluster; the `ray` extra, docs/scaling.md)."""
    ray_address: str = ""
    """With --env-backend ray: the cluster to join (`auto`, or `ray://host:10001`); empty = start a
    Ray instance on this machine."""

    def check(self) -> None:
        """Raises ValueError (one line)."""
        choose("env_backend", self.env_backend, BACKENDS)
        for name in ("env_step_timeout", "env_workers"):
            at_least(name, getattr(self, name), 0)
        if self.env_isolation and self.env_workers:
            raise ValueError("--env-isolation is one worker per env; pass it or --env-workers N, not both")
        if self.env_backend == "ray" and not (self.env_workers or self.env_isolation):
            raise ValueError("--env-backend ray runs envs in Ray actors: pass --env-workers N (or --env-isolation)")
        if self.ray_address and self.env_backend != "ray":
            raise ValueError("--ray-address is for --env-backend ray")

    def workers_for(self, n: int) -> int:
        """Worker count for a pool of n envs (0 = in-process); never more workers than envs."""
        return n if self.env_isolation else min(self.env_workers, n)


class StepTimeout(Exception):
    """An env call did not return within the step timeout."""


@contextmanager
def deadline(seconds: float):
    """Raise StepTimeout in the main thread if the block runs longer than `seconds` (SIGALRM).
    A no-op at 0, off the main thread, or where the platform has no interval timer."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise StepTimeout(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Host:
    """Some of a pool's envs, in one process (the trainer's, a worker's or a Ray actor's). Envs are
    made on first use; each call runs under the step timeout; an env whose call fails is dropped and
    made afresh on its next call. `call` never raises."""

    def __init__(self, env_id: str, env_kwargs: dict, timeout: float) -> None:
        import envs  # noqa: F401  (registers the built-in ids, also in a fresh worker)

        self.env_id, self.env_kwargs, self.timeout = env_id, dict(env_kwargs), timeout
        self.envs: dict[int, gym.Env] = {}

    def env(self, i: int) -> gym.Env:
        if i not in self.envs:
            self.envs[i] = gym.make(self.env_id, **self.env_kwargs)
        return self.envs[i]

    def call(self, i: int, cmd: str, arg: Any = None) -> Outcome:
        if cmd == "ping":
            return "ok", os.getpid()
        try:
            env = self.env(i)
            if cmd == "make":
                return "ok", None
            if cmd == "describe":  # what the trainer needs to know of the env without holding one
                return "ok", (env.observation_space, env.action_space, getattr(env.unwrapped, "num_tasks", None))
            with deadline(self.timeout):
                return "ok", env.reset(**arg) if cmd == "reset" else env.step(arg)
        except Exception as e:
            self.drop(i)
            return "error", f"{type(e).__name__}: {e}"

    def drop(self, i: int) -> None:
        env = self.envs.pop(i, None)
        if env is not None:
            with suppress(Exception):  # a broken env may fail to close too; it is dropped either way
                env.close()

    def close(self) -> None:
        for i in list(self.envs):
            self.drop(i)


class LocalPool:
    """Every env in this process (--env-workers 0): calls run one after another."""

    workers = 0

    def __init__(self, env_id: str, n: int, env_kwargs: dict, timeout: float) -> None:
        self.env_id, self.host, self.n = env_id, Host(env_id, env_kwargs, timeout), n
        self.describe()

    def describe(self) -> None:
        """The spaces and task count of env 0, wherever it lives (every pool's `run` reaches it)."""
        status, value = self.run([(0, "describe", None)])[0]
        if status != "ok":
            raise RuntimeError(f"{self.env_id}: cannot make the env: {value}")
        self.observation_space, self.action_space, self.num_tasks = value

    def run(self, calls: list[Call]) -> list[Outcome]:
        return [self.host.call(*c) for c in calls]

    def close(self) -> None:
        self.host.close()


class WorkerPool(LocalPool):
    """Envs spread over worker processes or actors (env i on worker i % workers); one round in
    parallel. Transports (`ProcessPool`, `RayPool`) say how to start, send to, hear from and kill a
    worker; the round, its deadlines and what a lost worker costs are here, once."""

    def __init__(self, env_id: str, n: int, env_kwargs: dict, timeout: float, workers: int) -> None:
        self.env_id, self.n, self.env_kwargs, self.timeout = env_id, n, dict(env_kwargs), timeout
        self.workers, self.restarts = workers, 0
        self.made: set[int] = set()  # envs known to exist in their worker: a call to any other may make it first
        for w in range(workers):
            self._start(w)
        made = self.run([(i, "make", None) for i in range(n)])  # every env now, in parallel: a bad id fails here
        failed = next((v for s, v in made if s != "ok"), None)
        if failed is not None:
            self.close()
            raise RuntimeError(f"{env_id}: cannot make the env in a worker: {failed}")
        try:
            self.describe()
        except RuntimeError:
            self.close()
            raise

    def owner(self, i: int) -> int:
        return i % self.workers

    def _allowance(self, i: int) -> float:
        """How long the worker may take over env i's call: the step timeout and the trip back, or, if the
        env may have to be made first, as long as making takes. 0 = no limit."""
        if self.timeout <= 0:
            return 0.0
        return max(self.timeout, MAKE_TIMEOUT) if i not in self.made else self.timeout + min(self.timeout, IPC_SLACK)

    def run(self, calls: list[Call]) -> list[Outcome]:
        out: list[Outcome | None] = [None] * len(calls)
        queue: dict[int, deque[int]] = {}  # worker -> positions of its calls, in the order it answers them
        for pos, (i, _, _) in enumerate(calls):
            queue.setdefault(self.owner(i), deque()).append(pos)
        due: dict[int, float] = {}
        for w, positions in queue.items():
            self._send(w, [calls[p] for p in positions])
            due[w] = self._due(calls[positions[0]][0])
        while any(queue.values()):
            busy = [w for w, q in queue.items() if q]
            limits = [due[w] for w in busy if due[w]]
            heard = self._hear(busy, max(0.0, min(limits) - time.monotonic()) if limits else None)
            for w, outcome in heard:
                if outcome is None:  # the worker died mid-round
                    self._lose(w, calls, out, queue, f"its env worker died ({self._death(w)})", dead=True)
                    continue
                pos = queue[w].popleft()
                out[pos] = outcome
                (self.made.add if outcome[0] == "ok" else self.made.discard)(calls[pos][0])
                if queue[w]:
                    due[w] = self._due(calls[queue[w][0]][0])
            now = time.monotonic()
            for w in busy:
                if queue[w] and due[w] and now >= due[w]:
                    limit = self._allowance(calls[queue[w][0]][0])
                    self._lose(w, calls, out, queue, f"no answer within {limit:g} s; its env worker was killed")
        return out  # type: ignore[return-value]

    def _due(self, i: int) -> float:
        allowance = self._allowance(i)
        return time.monotonic() + allowance if allowance else 0.0

    def _lose(self, w: int, calls: list[Call], out: list, queue: dict, why: str, dead: bool = False) -> None:
        """Worker w is gone or stuck: restart it, and end every episode it held in this round. A step it
        already answered that ended its episode stands; any other call of w's this round becomes an error
        (its env went with the worker)."""
        self._kill(w, dead)
        self._start(w)
        self.restarts += 1
        self.made -= {i for i in self.made if self.owner(i) == w}
        for pos, (i, cmd, _) in enumerate(calls):
            if self.owner(i) != w:
                continue
            done = out[pos] is not None and out[pos][0] == "ok" and cmd == "step" and (out[pos][1][2] or out[pos][1][3])
            if not done:
                out[pos] = ("error", why)
        queue[w].clear()

    # ---- the transport: how a worker is started, reached and stopped ---------------------
    def _start(self, w: int) -> None:
        raise NotImplementedError

    def _send(self, w: int, calls: list[Call]) -> None:
        raise NotImplementedError

    def _hear(self, workers: list[int], timeout: float | None) -> list[tuple[int, Outcome | None]]:
        """Answers that arrived within `timeout` (None = wait for one), in order per worker; None = died."""
        raise NotImplementedError

    def _death(self, w: int) -> str:
        return "lost"

    def _kill(self, w: int, dead: bool) -> None:
        raise NotImplementedError


def _pythonpath() -> str:
    """The trainer's import path, so a worker imports what the trainer can (`pkg:Env-v0`, the repo)."""
    return os.pathsep.join(os.path.abspath(p or os.curdir) for p in sys.path)


class ProcessPool(WorkerPool):
    """Worker processes on this machine (`python -m envs.workers`), each reached through a socket pair."""

    def __init__(self, env_id: str, n: int, env_kwargs: dict, timeout: float, workers: int) -> None:
        self.procs: dict[int, subprocess.Popen] = {}
        self.conns: dict[int, Connection] = {}
        super().__init__(env_id, n, env_kwargs, timeout, workers)

    def _start(self, w: int) -> None:
        mine, theirs = socket.socketpair()
        env = {**os.environ, "PYTHONPATH": _pythonpath()}
        proc = subprocess.Popen([sys.executable, "-m", "envs.workers", str(theirs.fileno())], pass_fds=[theirs.fileno()],
                                env=env, stdin=subprocess.DEVNULL)  # fmt: skip
        theirs.close()
        conn = Connection(mine.detach())
        conn.send((self.env_id, self.env_kwargs, self.timeout))
        self.procs[w], self.conns[w] = proc, conn

    def _send(self, w: int, calls: list[Call]) -> None:
        with suppress(OSError):  # a dead worker shows up when its answer does not come
            self.conns[w].send(calls)

    def _hear(self, workers: list[int], timeout: float | None) -> list[tuple[int, Outcome | None]]:
        by_conn = {self.conns[w]: w for w in workers}
        heard = []
        for conn in wait(list(by_conn), timeout):
            w = by_conn[conn]
            try:
                heard.append((w, conn.recv()))
            except (EOFError, OSError, pickle.UnpicklingError):
                heard.append((w, None))
        return heard

    def _death(self, w: int) -> str:
        with suppress(subprocess.TimeoutExpired):
            self.procs[w].wait(2)
        return f"exit code {self.procs[w].returncode}"

    def _kill(self, w: int, dead: bool) -> None:
        proc = self.procs[w]
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self.conns[w].close()

    def close(self) -> None:
        for conn in self.conns.values():
            with suppress(OSError):
                conn.send(None)  # close your envs and exit
        for w, proc in self.procs.items():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self.conns[w].close()


class RayPool(WorkerPool):
    """Workers as Ray actors (one CPU each, spread over the cluster's nodes). Ray restarts an actor
    that dies (max_restarts) or that the pool kills for hanging; its envs are made afresh there."""

    def __init__(self, env_id: str, n: int, env_kwargs: dict, timeout: float, workers: int, address: str = "") -> None:
        self.ray = ray_module()
        if not self.ray.is_initialized():
            local = {} if address else {"num_cpus": max(os.cpu_count() or 1, workers), "include_dashboard": False}
            self.ray.init(address=address or None, runtime_env={"env_vars": {"PYTHONPATH": _pythonpath()}},
                          logging_level="ERROR", **local)  # fmt: skip
        self.actor_class = self.ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0,
                                           scheduling_strategy="SPREAD")(Host)  # fmt: skip
        self.actors: dict[int, Any] = {}
        self.pending: dict[Any, int] = {}  # object ref -> worker
        self.order: dict[int, deque] = {}  # worker -> its refs in submission order (an actor answers in order)
        super().__init__(env_id, n, env_kwargs, timeout, workers)

    def _start(self, w: int) -> None:
        self.order[w] = deque()
        if w not in self.actors:
            self.actors[w] = self.actor_class.remote(self.env_id, self.env_kwargs, self.timeout)
            return
        # after a death or a kill Ray restarts the same actor (the handle stays valid), but a call sent
        # before Ray has seen the death still reaches the old one and fails: wait until one gets through
        for _ in range(100):
            with suppress(self.ray.exceptions.RayActorError):
                self.ray.get(self.actors[w].call.remote(-1, "ping"), timeout=MAKE_TIMEOUT)
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.env_id}: env worker {w} (a Ray actor) did not come back after a restart")

    def _send(self, w: int, calls: list[Call]) -> None:
        for call in calls:
            ref = self.actors[w].call.remote(*call)
            self.pending[ref] = w
            self.order[w].append(ref)

    def _hear(self, workers: list[int], timeout: float | None) -> list[tuple[int, Outcome | None]]:
        heads = [self.order[w][0] for w in workers if self.order[w]]
        ready, _ = self.ray.wait(heads, num_returns=1, timeout=timeout)
        heard = []
        for ref in ready:
            w = self.pending.pop(ref)
            self.order[w].popleft()
            try:
                heard.append((w, self.ray.get(ref)))
            except self.ray.exceptions.RayError:
                heard.append((w, None))
        return heard

    def _death(self, w: int) -> str:
        return "its Ray actor exited"

    def _kill(self, w: int, dead: bool) -> None:
        for ref in self.order[w]:
            self.pending.pop(ref, None)
        if not dead:  # a dead actor is being restarted by Ray already
            with suppress(Exception):
                self.ray.kill(self.actors[w], no_restart=False)

    def close(self) -> None:
        for actor in self.actors.values():
            with suppress(Exception):
                self.ray.kill(actor, no_restart=True)


def ray_module():
    """`import ray`, or one line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("--env-backend ray needs Ray: pip install 'textrl[ray]'") from None
    return ray


def make_pool(env_id: str, n: int, env_kwargs: dict | None = None, cfg: WorkerConfig | None = None):
    """The pool `cfg` asks for, holding n envs."""
    cfg = cfg or WorkerConfig()
    kwargs, workers = dict(env_kwargs or {}), cfg.workers_for(n)
    if not workers:
        return LocalPool(env_id, n, kwargs, cfg.env_step_timeout)
    if cfg.env_backend == "ray":
        return RayPool(env_id, n, kwargs, cfg.env_step_timeout, workers, cfg.ray_address)
    return ProcessPool(env_id, n, kwargs, cfg.env_step_timeout, workers)


def serve(fd: int) -> None:
    """A worker process: make a Host, then answer each round's calls one by one until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle; a worker ends with its socket
    conn = Connection(fd)
    env_id, env_kwargs, timeout = conn.recv()
    host = Host(env_id, env_kwargs, timeout)
    while True:
        try:
            calls = conn.recv()
        except (EOFError, OSError):  # the trainer is gone
            break
        if calls is None:
            break
        for call in calls:
            conn.send(host.call(*call))
    host.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
