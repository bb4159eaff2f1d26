"""IsolatedEnv: an env in a process of its own, for envs whose native code can hang or crash.

    python -m algos.train --env TextWorld-Cooking-v0 --env-isolation --env-step-timeout 30

In-process, a Python-level hang is cut by a SIGALRM timer (algos/collector.py), but a game
interpreter stuck in C code, or one that segfaults, takes the trainer with it. Here the env
lives in a child process (multiprocessing, spawn) and every call goes through a pipe: a call
that does not answer within the timeout kills the child (`StepTimeout`), a child that dies
mid-call raises `EnvCrashed`, and an exception inside the env comes back as `RuntimeError`.
The collector then ends that episode as truncated with an env error and makes the env afresh,
which starts a new process. Costs: one process per env (memory), and a pickled round trip
per call; worth it for TextWorld-style interpreters, not for pure-Python envs.

The child makes the env with `gymnasium.make(env_id, **kwargs)`, so the id must be registered
on import: a built-in id, or `pkg:Env-v0` (the child imports `pkg`).
"""

from __future__ import annotations

import multiprocessing
from typing import Any

import gymnasium as gym


class EnvCrashed(RuntimeError):
    """The env's process died during a call."""


class IsolatedTimeout(TimeoutError):
    """The env's process did not answer in time; it was killed."""


def _serve(conn, env_id: str, kwargs: dict) -> None:
    import envs  # noqa: F401  (registers the built-in ids)

    env = gym.make(env_id, **kwargs)
    conn.send(("ok", (env.observation_space, env.action_space, getattr(env.unwrapped, "num_tasks", None))))
    while True:
        cmd, arg = conn.recv()
        try:
            if cmd == "close":
                env.close()
                conn.send(("ok", None))
                return
            out = env.reset(**arg) if cmd == "reset" else env.step(arg)
            conn.send(("ok", out))
        except Exception as e:  # the env's own error; the process goes on
            conn.send(("error", f"{type(e).__name__}: {e}"))


class IsolatedEnv(gym.Env):
    """A Gymnasium env proxied to a child process; see the module docstring."""

    def __init__(self, env_id: str, env_kwargs: dict | None = None, timeout: float = 60.0) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, env_id, dict(env_kwargs or {})), daemon=True)
        self._proc.start()
        child.close()
        self.env_id, self.timeout = env_id, timeout
        # making the env may generate games: allow it longer than a step
        self.observation_space, self.action_space, num_tasks = self._receive(max(timeout, 600.0) if timeout else 0)
        if num_tasks is not None:  # a finite pool of tasks (TextWorld games), as the env says
            self.num_tasks = num_tasks

    @property
    def unwrapped(self) -> gym.Env:
        return self

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        return self._call("reset", {"seed": seed, "options": options})

    def step(self, action):
        return self._call("step", action)

    def close(self) -> None:
        if self._proc.is_alive():
            try:
                self._conn.send(("close", None))
                if self._conn.poll(5):
                    self._conn.recv()
            except (OSError, EOFError):
                pass
        self._kill()

    def _call(self, cmd: str, arg):
        try:
            self._conn.send((cmd, arg))
        except (OSError, BrokenPipeError):
            raise EnvCrashed(f"{self.env_id}: the env process is gone (exit code {self._proc.exitcode})") from None
        return self._receive(self.timeout)

    def _receive(self, timeout: float):
        if not self._conn.poll(timeout if timeout > 0 else None):
            self._kill()
            raise IsolatedTimeout(f"{self.env_id}: no answer within {timeout:g} s; the env process was killed")
        try:
            status, out = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(1)
            raise EnvCrashed(f"{self.env_id}: the env process died (exit code {self._proc.exitcode})") from None
        if status == "error":
            raise RuntimeError(out)
        return out

    def _kill(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(5)
        self._conn.close()
