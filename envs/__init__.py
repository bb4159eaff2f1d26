"""Text environments, registered with Gymnasium on import.

    import gymnasium as gym
    import envs  # registers the ids below
    env = gym.make("KeyDoor-v0")

Entry points are strings, so optional heavy dependencies import only when an env is made.
Users register their own envs the same way in their package and train on them with
`--env theirpkg:TheirEnv-v0` (Gymnasium imports `theirpkg` first).
"""

import gymnasium as gym

from envs.base import TextEnv

# id -> (kwargs, max_episode_steps, one-line description)
KEYDOOR_IDS = {
    "KeyDoor-Easy-v0": (
        dict(width=3, height=3, num_locks=1, num_distractors=1),
        16,
        "3x3 rooms, one locked vault, one distractor, compass",
    ),
    "KeyDoor-v0": (
        dict(width=3, height=3, num_locks=1, num_distractors=2, num_false_keys=1, walls=0.3),
        20,
        "3x3 rooms with walls, one locked vault, distractors and a key that fits nothing",
    ),
    "KeyDoor-Hard-v0": (
        dict(width=4, height=4, num_locks=2, num_distractors=3, num_false_keys=1, walls=0.3),
        40,
        "4x4 rooms with walls, a chain of two locks, distractors",
    ),
    "KeyDoor-Explore-v0": (
        dict(width=3, height=3, num_locks=1, num_distractors=1, compass=False),
        30,
        "3x3 rooms without a compass: the agent must explore and remember",
    ),
}

for _id, (_kwargs, _steps, _doc) in KEYDOOR_IDS.items():
    if _id not in gym.registry:
        gym.register(
            id=_id,
            entry_point="envs.keydoor:KeyDoorEnv",
            kwargs=_kwargs,
            max_episode_steps=_steps,
        )

__all__ = ["KEYDOOR_IDS", "TextEnv"]
