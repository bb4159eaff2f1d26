"""Envs that crash or hang on purpose, importable by an env worker process (envs/workers.py):
`faulty_envs:CrashyKeyDoor-v0` and `faulty_envs:Scripted-v0`."""

import os
import signal
import string
import time

import gymnasium as gym

from envs.keydoor import KeyDoorEnv


def native_hang(seconds: float = 60) -> None:
    """Hang as a game interpreter stuck in C code does: the step timer (SIGALRM) cannot cut it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    time.sleep(seconds)


class CrashyKeyDoor(KeyDoorEnv):
    """KeyDoor whose process dies (os._exit) on some steps and hangs in "native code" on others, decided
    by the reset seed and the step number, so a run with the same actions meets the same faults. Every
    fault is logged to $FAULT_LOG before it happens."""

    def reset(self, *, seed=None, options=None):
        self.seed_used, self.t = seed or 0, 0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        self.t += 1
        roll = (self.seed_used * 7919 + self.t * 104729) % 97
        if roll < 3:
            self._log("crash")
            os._exit(3)  # as a segfaulting interpreter would: no exception, no cleanup
        if roll < 8:
            self._log("hang")
            native_hang()
        return super().step(action)

    @staticmethod
    def _log(kind: str) -> None:
        with open(os.environ["FAULT_LOG"], "a") as f:
            f.write(kind + "\n")


class Scripted(gym.Env):
    """Does what the action says: `crash` (the process dies), `hang` (native, past any timer), `sleep`
    (a Python-level hang the step timer cuts), `raise`, `finish` (the episode ends, won); anything else
    is a step that goes on. The observation counts the steps since reset."""

    observation_space = gym.spaces.Text(max_length=64, charset=string.printable)
    action_space = gym.spaces.Text(max_length=64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return f"seed {seed} step 0", {"won": False}

    def step(self, action):
        self.t += 1
        if action == "crash":
            os._exit(3)
        if action == "hang":
            native_hang()
        if action == "sleep":
            time.sleep(60)
        if action == "raise":
            raise RuntimeError("the env broke")
        return f"step {self.t}", float(action == "finish"), action == "finish", False, {"won": action == "finish"}


for _id, _entry in (("CrashyKeyDoor-v0", CrashyKeyDoor), ("Scripted-v0", Scripted)):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry, max_episode_steps=20)
