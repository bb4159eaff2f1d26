"""Envs that crash or hang on purpose, importable by a child process (envs.isolated):
`faulty_envs:CrashyKeyDoor-v0`. Every fault is logged to $FAULT_LOG before it happens."""

import os
import time

import gymnasium as gym

from envs.keydoor import KeyDoorEnv


class CrashyKeyDoor(KeyDoorEnv):
    """KeyDoor whose process dies (os._exit) on some steps and hangs on others, decided by the
    reset seed and the step number, so a run with the same actions meets the same faults."""

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
            time.sleep(60)
        return super().step(action)

    @staticmethod
    def _log(kind: str) -> None:
        with open(os.environ["FAULT_LOG"], "a") as f:
            f.write(kind + "\n")


if "CrashyKeyDoor-v0" not in gym.registry:
    gym.register(id="CrashyKeyDoor-v0", entry_point=CrashyKeyDoor, max_episode_steps=20)
