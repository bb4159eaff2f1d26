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
from envs.sokoban import LEVELS as SOKOBAN_LEVELS

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

# Sokoban puzzles drawn by reverse play from the solved board (envs/sokoban.py); the step
# limit of each id is its level's. `gym.make(id, level=L, max_episode_steps=...)` for others.
SOKOBAN_IDS = {
    "Sokoban-v0": (dict(level=1), SOKOBAN_LEVELS[1].max_steps, "Sokoban, 5x5 room, one box: push it onto the goal"),
    "Sokoban-Medium-v0": (dict(level=2), SOKOBAN_LEVELS[2].max_steps, "Sokoban, 6x6 room, two boxes"),
    "Sokoban-Hard-v0": (dict(level=3), SOKOBAN_LEVELS[3].max_steps, "Sokoban, 7x7 room, two boxes, more walls"),
    "Sokoban-Expert-v0": (dict(level=4), SOKOBAN_LEVELS[4].max_steps, "Sokoban, 8x8 room, three boxes"),
}

# Single-turn verifiable problems (one step per episode): the classic GRPO setting, with
# a reference answer in info["answer"] for the verifiers, rubrics and judges of rewards/.
SINGLE_TURN_IDS = {
    "Arithmetic-v0": (
        dict(level=1),
        1,
        "arithmetic with exact answers, one step: level=1..5 (a + b up to (a + b) * c - d)",
    ),
    "WordProblems-v0": (
        dict(level=1, word_problems=True),
        1,
        "short word problems with exact answers, one step: level=1..3 (one addition up to two steps)",
    ),
}

# TextWorld (pip install textrl[textworld]): games generated offline by TextWorld's own
# generator, `gym.make(id, level=L)` picks the difficulty; or any games with
# TextWorld-Games-v0 (games_dir=...). See envs/tw_env.py.
TEXTWORLD_IDS = {
    "TextWorld-CoinCollector-v0": (
        dict(family="coin", level=5),
        25,
        "TextWorld coin collector: follow the directions to the coin; level=1..300",
    ),
    "TextWorld-TreasureHunter-v0": (
        dict(family="treasure", level=5),
        30,
        "TextWorld treasure hunter: find and take the named object, not a decoy; level=1..30",
    ),
    "TextWorld-Cooking-v0": (
        dict(family="cooking", level=1),
        40,
        "TextWorld cooking: read the recipe, gather, cut, cook and eat; level=1..8",
    ),
    "TextWorld-Simple-v0": (
        dict(family="simple", level=1),
        50,
        "TextWorld simple house game: open, unlock, carry, put; level=1..3 (dense to sparse rewards)",
    ),
    "TextWorld-Games-v0": (
        dict(),
        50,
        "any TextWorld games: games_dir= or games=[...] (.z8/.z5 + .json, .tw-pddl), held-out split",
    ),
}

for _id, (_kwargs, _steps, _doc) in KEYDOOR_IDS.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point="envs.keydoor:KeyDoorEnv", kwargs=_kwargs, max_episode_steps=_steps)

for _id, (_kwargs, _steps, _doc) in SOKOBAN_IDS.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point="envs.sokoban:SokobanEnv", kwargs=_kwargs, max_episode_steps=_steps)

for _id, (_kwargs, _steps, _doc) in SINGLE_TURN_IDS.items():
    if _id not in gym.registry:
        gym.register(id=_id, entry_point="envs.arithmetic:ArithmeticEnv", kwargs=_kwargs, max_episode_steps=_steps)

for _id, (_kwargs, _steps, _doc) in TEXTWORLD_IDS.items():
    _entry = "envs.tw_env:TextWorldFamilyEnv" if _kwargs else "envs.tw_env:TextWorldGamesEnv"
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry, kwargs=_kwargs, max_episode_steps=_steps)

__all__ = ["KEYDOOR_IDS", "SINGLE_TURN_IDS", "SOKOBAN_IDS", "TEXTWORLD_IDS", "TextEnv", "prompt_template"]


def env_metadata(env_id: str) -> dict:
    """The env class's `metadata`, without making an env."""
    import importlib

    from gymnasium.envs.registration import load_env_creator

    if ":" in env_id:  # Gymnasium's "pkg:Env-v0": the package registers the id on import
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    entry = gym.spec(env_id).entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    return dict(getattr(creator, "metadata", {}) or {})


def prompt_template(env_id: str) -> str:
    """The prompt template an env asks for in `metadata["prompt_template"]` ("default" if none)."""
    return str(env_metadata(env_id).get("prompt_template", "default"))
