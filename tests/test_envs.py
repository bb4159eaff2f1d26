import random

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs.keydoor import KeyDoorEnv

IDS = list(envs.KEYDOOR_IDS)
CONTRACT = {"state_key", "admissible_commands", "won", "lost", "expert_action", "task", "action_valid"}


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_passes(env_id):
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", IDS)
def test_expert_solves_every_layout_within_the_step_limit(env_id):
    env = gym.make(env_id)
    for seed in range(40):
        obs, info = env.reset(seed=seed)
        assert set(info) >= CONTRACT
        while True:
            assert info["expert_action"] in info["admissible_commands"]
            obs, reward, term, trunc, info = env.step(info["expert_action"])
            assert set(info) >= CONTRACT and env.observation_space.contains(obs)
            if term or trunc:
                break
        assert term and not trunc and info["won"] and reward == 1.0
        assert info["expert_action"] is None


def _rollout(env_id, seed, policy_seed):
    env = gym.make(env_id)
    obs, info = env.reset(seed=seed)
    rng = random.Random(policy_seed)
    out = [(obs, info["state_key"])]
    for _ in range(30):
        obs, r, term, trunc, info = env.step(rng.choice(info["admissible_commands"]))
        out.append((obs, info["state_key"], r))
        if term or trunc:
            break
    return out


def test_same_seed_same_layout_and_dynamics():
    assert _rollout("KeyDoor-v0", 7, 1) == _rollout("KeyDoor-v0", 7, 1)
    assert _rollout("KeyDoor-v0", 7, 1)[0] != _rollout("KeyDoor-v0", 8, 1)[0]


def test_state_key_is_position_inventory_doors_not_feedback():
    env = gym.make("KeyDoor-Easy-v0")
    _, info = env.reset(seed=3)
    key0 = info["state_key"]
    _, _, _, _, info = env.step("dance wildly")
    assert not info["action_valid"] and info["state_key"] == key0
    # the same state reached by two different routes has the same key
    _, info = env.reset(seed=3)
    go = next(c for c in info["admissible_commands"] if c.startswith("go "))
    back = {"north": "south", "south": "north", "east": "west", "west": "east"}[go.split()[1]]
    env.step(go)
    _, _, _, _, info = env.step(f"go {back}")
    assert info["state_key"] == key0


@pytest.mark.parametrize("action", ["", "   ", "\x00\xff", "GO   NORTH", "take", "unlock up", "x" * 10000, 42])
def test_invalid_or_odd_actions_never_raise(action):
    env = gym.make("KeyDoor-v0")
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(action)
    assert env.observation_space.contains(obs) and reward == 0.0 and not term


def test_locked_door_needs_its_key():
    env = KeyDoorEnv(width=2, height=1, num_locks=1, num_distractors=0)
    obs, info = env.reset(seed=0)
    # two rooms: start room with the key, vault behind the locked door
    assert "red key" in obs and "locked" in obs
    door = "east" if "east (red door" in obs else "west"
    _, _, _, _, info = env.step(f"go {door}")
    assert not info["action_valid"]
    _, _, _, _, info = env.step(f"unlock {door}")
    assert not info["action_valid"]  # no key yet
    env.step("take red key")
    _, _, _, _, info = env.step(f"unlock {door}")
    assert info["action_valid"] and f"go {door}" in info["admissible_commands"]
    env.step(f"go {door}")
    _, reward, term, _, info = env.step("take treasure")
    assert (reward, term, info["won"]) == (1.0, True, True)


def test_time_limit_truncates():
    env = gym.make("KeyDoor-Easy-v0")
    env.reset(seed=0)
    for _ in range(envs.KEYDOOR_IDS["KeyDoor-Easy-v0"][1]):
        _, _, term, trunc, _ = env.step("wait")
    assert trunc and not term


def test_bad_knobs_raise_clear_errors():
    with pytest.raises(ValueError, match="cannot hold"):
        KeyDoorEnv(width=2, height=2, num_locks=4)
    with pytest.raises(ValueError, match="walls"):
        KeyDoorEnv(walls=2.0)
