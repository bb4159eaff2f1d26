"""Sokoban (envs/sokoban.py, envs/sokoban_board.py): generation, the expert, deadlocks, rendering, the contract.

Hand-made boards use the legend's symbols; their expected plans and deadlocks are worked out by
hand in the comments next to them.
"""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from test_contracts import info_problems

import envs
from envs.base import HELD_OUT_SEED
from envs.sokoban import LEVELS, SokobanEnv
from envs.sokoban_board import LEGEND, deadlock, generate, parse, render, solve

IDS = list(envs.SOKOBAN_IDS)


def play_expert(env, seed):
    """Follow the expert from reset(seed) to the end; (infos, last reward, terminated, truncated)."""
    _, info = env.reset(seed=seed)
    infos = [info]
    while True:
        assert info["expert_action"] in info["admissible_commands"]
        _, reward, term, trunc, info = env.step(info["expert_action"])
        infos.append(info)
        if term or trunc:
            return infos, reward, term, trunc


# -- registration, seeding, generation --------------------------------------------------------
@pytest.mark.parametrize("env_id", IDS)
def test_check_env_passes(env_id):
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


def test_each_id_has_its_levels_step_limit():
    for env_id, (kwargs, steps, _) in envs.SOKOBAN_IDS.items():
        assert gym.spec(env_id).max_episode_steps == steps == LEVELS[kwargs["level"]].max_steps


# level 4 draws take ~0.3 s each (rejected draws cost solver time): its check_env already resets it with seeds
@pytest.mark.parametrize("level", [1, 2, 3, pytest.param(4, marks=pytest.mark.slow)])
def test_same_seed_same_puzzle_other_seeds_other_puzzles(level):
    env = SokobanEnv(level=level)
    first = env.reset(seed=5)
    assert env.reset(seed=5) == first
    others = {env.reset(seed=s)[0] for s in (6, 7, HELD_OUT_SEED)}
    assert first[0] not in others and len(others) == 3


def test_every_level_1_puzzle_is_solved_by_the_expert_within_the_step_limit():
    env = gym.make("Sokoban-v0")
    limit = LEVELS[1].max_steps
    for seed in [*range(50), HELD_OUT_SEED, HELD_OUT_SEED + 1]:
        infos, reward, term, trunc = play_expert(env, seed)
        assert term and not trunc and infos[-1]["won"] and reward == 1.0, seed
        assert LEVELS[1].min_moves <= len(infos) - 1 <= limit // 2
        assert infos[0]["state_key"].count("$") == 1  # the box starts off its goal
        assert infos[-1]["expert_action"] is None and infos[-1]["admissible_commands"] is None


@pytest.mark.parametrize("level, seeds", [(2, range(6)), (3, range(4)), (4, range(2))])
def test_a_sample_of_harder_puzzles_is_solved_by_the_expert(level, seeds):
    env = SokobanEnv(level=level)
    for seed in seeds:
        infos, reward, term, _ = play_expert(env, seed)
        assert term and infos[-1]["won"] and reward == 1.0
        assert len(infos) - 1 <= LEVELS[level].max_steps // 2
        assert infos[0]["state_key"].count("$") == LEVELS[level].boxes


@pytest.mark.slow
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_many_puzzles_per_level_are_solved_by_the_expert(level):
    env = SokobanEnv(level=level)
    for seed in range(200 if level < 4 else 30):
        assert play_expert(env, seed)[0][-1]["won"], seed


def test_generated_plan_is_optimal_and_starts_off_the_goals():
    lv = LEVELS[2]
    puzzle, plan = generate(np.random.default_rng(3), lv.width, lv.height, lv.boxes, lv.walls, lv.moves)
    assert not puzzle.start[1] & puzzle.goals and deadlock(puzzle, puzzle.start[1]) is None
    assert solve(puzzle, puzzle.start) == plan and lv.moves[0] <= len(plan) <= lv.moves[1]


# -- the expert ---------------------------------------------------------------------------------
# Player at row 3 col 3 must reach (1, 1), four moves away, to push the box right twice onto the goal.
ALONG_THE_WALL = """
######
#_$_.#
#____#
#__@_#
######
"""


def test_solver_finds_the_hand_computed_shortest_plan():
    puzzle = parse(ALONG_THE_WALL)
    plan = solve(puzzle, puzzle.start)
    assert len(plan) == 6 and plan[-2:] == ["right", "right"]
    assert solve(puzzle, puzzle.start, max_nodes=2) is None  # over its budget: no plan, not a wrong one


def test_expert_replans_after_the_agent_leaves_the_plan():
    env = gym.make("Sokoban-v0")
    _, info = env.reset(seed=11)
    detour = next(c for c in info["admissible_commands"] if c != info["expert_action"])
    _, _, term, _, info = env.step(detour)
    steps = 1
    while not term:
        _, reward, term, trunc, info = env.step(info["expert_action"])
        steps += 1
        assert not trunc
    assert info["won"] and steps <= LEVELS[1].max_steps


def test_expert_is_none_when_the_board_cannot_be_solved():
    # two boxes on the top wall row, which holds one goal: each can only slide along it; no rule flags it
    env = SokobanEnv()
    _, info = env.reset(options={"board": "#######\n#_$.$_#\n#_____#\n#__@_.#\n#######"})
    assert info["expert_action"] is None and not info["lost"] and info["admissible_commands"]


# -- deadlocks ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "board, dead",
    [
        ("#####\n#$_.#\n#_@_#\n#####", True),  # a box in a corner without a goal
        ("#####\n#*__#\n#_@_#\n#####", False),  # a box in a corner on its goal
        ("######\n#_$__#\n#____#\n#_.@_#\n######", True),  # on the top wall, which has no goal: never leaves it
        (ALONG_THE_WALL, False),  # on the top wall, which has a goal
        ("#######\n#_$$_.#\n#___._#\n#__@__#\n#######", True),  # side by side on a wall: a frozen 2x2 block
        ("#######\n#_**__#\n#_____#\n#__@__#\n#######", False),  # the same block, both boxes on goals
        ("#######\n#_____#\n#_$$_.#\n#_$$_.#\n#_@_..#\n#######", True),  # four boxes in a 2x2 in the open
    ],
)
def test_deadlock_rules_on_hand_made_boards(board, dead):
    puzzle = parse(board)
    assert (deadlock(puzzle, puzzle.start[1]) is not None) == dead


def test_pushing_a_box_into_a_corner_loses():
    # the box at (2, 1) can still be pushed down onto the goal under the player; pushed up it is cornered
    env = gym.make("Sokoban-v0")
    _, info = env.reset(options={"board": "#####\n#___#\n#$__#\n#+__#\n#####"})
    assert info["expert_action"] == "right" and not info["lost"]
    obs, reward, term, trunc, info = env.step("up")
    assert (reward, term, trunc, info["won"], info["lost"]) == (0.0, True, False, False, True)
    assert "never reach a goal" in obs and info["expert_action"] is None and info_problems(info) == []


def test_freezing_two_boxes_on_a_wall_loses():
    env = SokobanEnv()
    _, info = env.reset(options={"board": "#######\n#_$__.#\n#__$__#\n#__@_.#\n#######"})
    obs, _, term, _, info = env.step("up")  # the lower box joins the upper one under the top wall
    assert term and info["lost"] and "frozen" in obs


def test_last_box_on_its_goal_wins():
    env = SokobanEnv()
    env.reset(options={"board": "######\n#__$.#\n#_@__#\n#____#\n######"})
    _, _, _, _, info = env.step("up")  # player (2, 2) -> (1, 2), behind the box at (1, 3)
    obs, reward, term, _, info = env.step("right")
    assert (reward, term, info["won"], info["lost"]) == (1.0, True, True, False) and "win" in obs


# -- rendering, state keys, actions -------------------------------------------------------------
def test_rendering_a_hand_made_board():
    text = "#######\n#+ $ *#\n#_._$_#\n#######"  # a space is floor too
    puzzle = parse(text)
    assert render(puzzle, puzzle.start) == "#######\n#+_$_*#\n#_._$_#\n#######"
    env = SokobanEnv(render_mode="ansi")
    obs, info = env.reset(options={"board": text})
    assert env.render() == f"{render(puzzle, puzzle.start)}\nLegend: {LEGEND}"
    assert obs == f"Board:\n{render(puzzle, puzzle.start)}\nBoxes on goals: 1 of 3."
    assert info["state_key"] == "#######/#+_$_*#/#_._$_#/#######" and LEGEND in info["task"]
    with pytest.raises(ValueError, match="unknown board symbol"):
        parse("#####\n#@$x#\n#####")


def test_state_key_is_the_board_whatever_the_route():
    env = SokobanEnv()
    _, info = env.reset(options={"board": ALONG_THE_WALL})
    start = info["state_key"]
    _, _, _, _, info = env.step("down")  # into the wall
    assert not info["action_valid"] and info["state_key"] == start
    env.step("left")
    _, _, _, _, info = env.step("right")
    assert info["action_valid"] and info["state_key"] == start
    assert info["admissible_commands"] == ["up", "left", "right"]  # only moves that change the board


@pytest.mark.parametrize("action", ["", "   ", "xyzzy frobnicate", "north", "\x00\xff", "x" * 10000, 42])
def test_invalid_actions_never_raise(action):
    env = gym.make("Sokoban-v0")
    _, info = env.reset(seed=0)
    obs, reward, term, trunc, after = env.step(action)
    assert env.observation_space.contains(obs) and (reward, term, trunc) == (0.0, False, False)
    assert after["action_valid"] is False and after["state_key"] == info["state_key"]
    assert info_problems(after) == []


@pytest.mark.parametrize("action", ["UP", "  Move   up ", "go up", "push up"])
def test_move_aliases_and_case_are_read_as_the_move(action):
    env = SokobanEnv()
    env.reset(options={"board": ALONG_THE_WALL})
    _, _, _, _, info = env.step(action)
    assert info["action_valid"] and info["state_key"] == "######/#_$_.#/#__@_#/#____#/######"


def test_expert_episode_infos_are_step_infos():
    infos, _, _, _ = play_expert(gym.make("Sokoban-Medium-v0"), 0)
    assert all(info_problems(info) == [] for info in infos)


def test_bad_levels_raise_clear_errors():
    for level in (0, 5, "1", 1.0):
        with pytest.raises(ValueError, match="level must be an integer"):
            SokobanEnv(level=level)
