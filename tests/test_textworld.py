"""TextWorld envs: real games generated offline by TextWorld, played through the real interpreter.

Games are generated once per test session into the session's private cache (conftest),
in small pools, so the whole file stays within seconds of generation.
"""

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

pytest.importorskip("textworld")

from cold_start import COLD_UPDATES  # noqa: E402

import envs  # noqa: E402
from envs.base import HELD_OUT_SEED  # noqa: E402
from envs.tw_games import GameError, check_game_file, game_path, pool_seeds  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = {"state_key", "admissible_commands", "won", "lost", "expert_action", "task", "action_valid"}
POOL = dict(num_games=3, num_held_out=2)
FAMILY_IDS = [i for i in envs.TEXTWORLD_IDS if i != "TextWorld-Games-v0"]


def make(env_id="TextWorld-CoinCollector-v0", **kwargs):
    """A family env with a small pool (coin collector level 3 unless told otherwise)."""
    return gym.make(env_id, **{**POOL, "level": 3, **kwargs})


def play(env, seed, commands):
    obs, info = env.reset(seed=seed)
    out = [(obs, info)]
    for c in commands:
        obs, r, term, trunc, info = env.step(c)
        out.append((obs, info, r, term, trunc))
    return out


@pytest.fixture(scope="session")
def coin_games():
    """A folder of real game files (a copy of a generated pool), as users bring them."""
    make().close()
    return [game_path("coin", 3, s) for s in pool_seeds(3, False)] + [
        game_path("coin", 3, s, True) for s in pool_seeds(2, True)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("env_id", FAMILY_IDS)
def test_check_env_and_expert_wins_every_family(env_id):
    level = {"TextWorld-Cooking-v0": 2}.get(env_id, 1)
    env = make(env_id, level=level, num_games=2, num_held_out=1)
    check_env(env.unwrapped, skip_render_check=True)
    for seed in (0, 1, HELD_OUT_SEED):
        obs, info = env.reset(seed=seed)
        assert set(info) >= CONTRACT and env.observation_space.contains(obs)
        total = 0.0
        while True:
            assert info["expert_action"] in info["admissible_commands"]
            obs, reward, term, trunc, info = env.step(info["expert_action"])
            assert set(info) >= CONTRACT and env.observation_space.contains(obs)
            assert reward >= 0 and reward == int(reward)  # score deltas, not the cumulative score
            total += reward
            if term or trunc:
                break
        state = env.unwrapped._state
        assert term and not trunc and info["won"] and not info["lost"]
        assert total == state["score"] == state["max_score"] > 0
        assert info["expert_action"] is None and info["admissible_commands"] is None


@pytest.mark.slow
def test_same_seed_same_game_two_seeds_different_games():
    a, b = make(), make()
    first = a.reset(seed=1)
    assert first == b.reset(seed=1)
    assert first[1]["game"] != a.reset(seed=2)[1]["game"]
    assert first[0] + first[1]["task"] != a.reset(seed=2)[0] + a.reset(seed=2)[1]["task"]
    # the seed picks the game modulo the pool; held-out seeds pick held-out games only
    assert a.reset(seed=1 + 3)[1]["game"] == first[1]["game"]
    held = {a.reset(seed=HELD_OUT_SEED + i)[1]["game"] for i in range(4)}
    train = {a.reset(seed=i)[1]["game"] for i in range(3)}
    assert len(held) == 2 and len(train) == 3 and not held & train


def test_state_keys_follow_the_true_state_not_the_feedback():
    env = make()
    obs, info = env.reset(seed=0)
    start = info["state_key"]
    exits = {c.split()[1] for c in info["admissible_commands"] if c.startswith("go ")}
    wall = next(d for d in ("north", "south", "east", "west") if d not in exits)
    first_exit = sorted(exits)[0]
    back = {"north": "south", "south": "north", "east": "west", "west": "east"}[first_exit]

    bump = env.step(f"go {wall}")
    assert bump[4]["state_key"] == start  # a failed move changes nothing
    moved = env.step(f"go {first_exit}")[4]["state_key"]
    assert moved != start
    returned = env.step(f"go {back}")[4]
    assert returned["state_key"] == start  # the same state reached by another path: same key
    assert env.step("look")[4]["state_key"] == start and env.step("inventory")[4]["state_key"] == start

    # the same feedback text in two different states: different keys
    env.step(f"go {first_exit}")
    next_adm = env.unwrapped._state["admissible_commands"]
    exits2 = {c.split()[1] for c in next_adm if c.startswith("go ")}
    wall2 = next(d for d in ("north", "south", "east", "west") if d not in exits2)
    bump2 = env.step(f"go {wall2}")
    assert bump2[0] == bump[0] == "You can't go that way."
    assert bump2[4]["state_key"] != bump[4]["state_key"]


@pytest.mark.slow
def test_state_key_sees_object_states_in_cooking():
    env = make("TextWorld-Cooking-v0", level=2, num_games=2, num_held_out=1)
    obs, info = env.reset(seed=0)
    start = info["state_key"]
    opening = next(c for c in info["admissible_commands"] if c.startswith("open "))
    _, _, _, _, opened = env.step(opening)
    # same room, same inventory, but a container changed state: a different key
    assert opened["state_key"] != start and opened["state_key"].split("|")[:2] == start.split("|")[:2]
    _, _, _, _, closed = env.step("close " + opening[len("open ") :])
    assert closed["state_key"] == start


def test_expert_action_is_recomputed_after_a_detour_and_still_wins():
    env = make()
    obs, info = env.reset(seed=0)
    plan = info["expert_action"]
    detour = next(c for c in info["admissible_commands"] if c.startswith("go ") and c != plan) if any(
        c.startswith("go ") and c != plan for c in info["admissible_commands"]
    ) else "inventory"  # fmt: skip
    obs, _, _, _, info = env.step(detour)
    for _ in range(20):
        obs, reward, term, trunc, info = env.step(info["expert_action"])
        if term:
            break
    assert term and info["won"] and reward == 1.0


@pytest.mark.slow
def test_taking_the_wrong_object_loses_treasure_hunter():
    env = make("TextWorld-TreasureHunter-v0", level=5)
    rng = random.Random(0)
    obs, info = env.reset(seed=0)
    target = next(c for c in env.unwrapped._state["policy_commands"] if c.startswith("take "))
    for _ in range(200):  # wander until the decoy is in reach (5 rooms)
        wrong = [c for c in info["admissible_commands"] if c.startswith("take ") and c != target]
        if wrong:
            break
        obs, _, _, _, info = env.step(rng.choice([c for c in info["admissible_commands"] if c.startswith("go ")]))
    obs, reward, term, trunc, info = env.step(wrong[0])
    assert term and info["lost"] and not info["won"] and reward == 0.0


def test_time_limit_truncates_and_invalid_commands_never_raise():
    env = make(max_episode_steps=2)
    obs, info = env.reset(seed=0)
    obs, r, term, trunc, info = env.step("\\dance wildly\x00 <with> \\p")  # interpreter meta-escapes stripped
    assert not info["action_valid"] and not term and not trunc and env.observation_space.contains(obs)
    obs, r, term, trunc, info = env.step("x" * 10_000)
    assert trunc and not term


def test_interpreter_crash_ends_the_episode_truncated_and_the_env_recovers():
    env = make()
    obs, info = env.reset(seed=0)
    env.unwrapped._game.close()  # the real interpreter stops under the env's feet
    obs, reward, term, trunc, info = env.step(info["expert_action"])
    assert trunc and not term and info["error"] and not info["won"] and info["game"].endswith("game.z8")
    assert env.observation_space.contains(obs) and set(info) >= CONTRACT
    obs, info = env.reset(seed=0)  # reloads the game
    while True:
        obs, reward, term, trunc, info = env.step(info["expert_action"])
        if term or trunc:
            break
    assert info["won"] and "error" not in info


def test_games_dir_env_with_stable_held_out_split(coin_games, tmp_path):
    for i, path in enumerate(coin_games):
        for f in (path, path.with_suffix(".json")):
            (tmp_path / f"g{i}").mkdir(exist_ok=True)
            shutil.copy(f, tmp_path / f"g{i}" / f.name)
    env = gym.make("TextWorld-Games-v0", games_dir=str(tmp_path), held_out_fraction=0.4)
    check_env(env.unwrapped, skip_render_check=True)
    u = env.unwrapped
    assert len(u.train_games) == 3 and len(u.held_out_games) == 2 and not set(u.train_games) & set(u.held_out_games)
    again = gym.make("TextWorld-Games-v0", games_dir=str(tmp_path), held_out_fraction=0.4).unwrapped
    assert again.held_out_games == u.held_out_games
    obs, info = env.reset(seed=HELD_OUT_SEED)
    assert Path(info["game"]) in u.held_out_games and info["expert_action"]
    listed = gym.make("TextWorld-Games-v0", games=[str(p) for p in coin_games[:2]], held_out_games=[str(coin_games[4])])
    assert listed.unwrapped.held_out_games == [coin_games[4]] and len(listed.unwrapped.train_games) == 2


def test_bad_games_give_one_clear_error(coin_games, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(GameError, match="no TextWorld games"):
        gym.make("TextWorld-Games-v0", games_dir=str(empty))
    bad = tmp_path / "bad"
    bad.mkdir()
    data = bytearray(coin_games[0].read_bytes())
    data[5000] ^= 0xFF  # one flipped byte: the interpreter would run garbage or abort the process
    (bad / "game.z8").write_bytes(bytes(data))
    shutil.copy(coin_games[0].with_suffix(".json"), bad / "game.json")
    with pytest.raises(GameError, match="checksum"):
        check_game_file(bad / "game.z8")
    (bad / "game.z8").write_bytes(b"garbage" * 20)
    with pytest.raises(GameError, match="version"):
        gym.make("TextWorld-Games-v0", games_dir=str(bad))
    (bad / "game.json").unlink()
    shutil.copy(coin_games[0], bad / "game.z8")
    with pytest.raises(GameError, match="missing game.json"):
        gym.make("TextWorld-Games-v0", games_dir=str(bad))
    (bad / "old.ulx").write_bytes(b"Glul")
    with pytest.raises(GameError, match="Glulx"):
        check_game_file(bad / "old.ulx")
    (bad / "alf.tw-pddl").write_text('{"pddl_domain": "(define)"}')
    with pytest.raises(GameError, match="missing pddl_problem, grammar"):
        check_game_file(bad / "alf.tw-pddl")
    with pytest.raises(GameError, match="level must be an integer in 1..300"):
        make(level=301)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--env-kwargs", "level", "0"], "level must be an integer in 1..300 (got 0)"),
        (["--env-kwargs", "levle", "3"], "unexpected keyword argument 'levle'"),
    ],
)
def test_train_cli_reports_bad_env_knobs_in_one_line(capsys, tmp_path, flags, needle):
    from algos.train import main

    assert main(["--env", "TextWorld-CoinCollector-v0", *flags, "--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and needle in err and "\n" not in err


@pytest.mark.slow
def test_concurrent_runs_generate_one_intact_cache(tmp_path):
    env = {**os.environ, "TEXTRL_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "envs.tw_games", "treasure", "--level", "2", "--games", "3", "--held-out", "0",
           "--workers", "1"]  # fmt: skip
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    root = next((tmp_path / "cache").glob("textworld-*")) / "treasure" / "level2"
    assert sorted(d.name for d in root.iterdir()) == ["train-0", "train-1", "train-2"]  # no half-built leftovers
    for d in root.iterdir():
        check_game_file(d / "game.z8")
        assert json.loads((d / "game.json").read_text())


def test_textworld_prompt_template_is_chosen_from_the_env():
    from agents.prompt import PromptBuilder

    assert envs.prompt_template("TextWorld-CoinCollector-v0") == "textworld"
    assert envs.prompt_template("KeyDoor-v0") == "default"
    history = [("-= Hall =-", "go east"), ("-= Den =-", "take coin")]
    system, user = PromptBuilder(memory=1, template="textworld").messages("Find the coin.", history, "Done.", ["look"])
    assert "Goal: Find the coin." in system["content"]
    assert user["content"] == (
        "Step 3.\nRecent history:\n[2] -= Den =-\n> take coin\nCurrent observation:\nDone.\nAdmissible commands: look"
    )


@pytest.mark.slow
def test_training_runs_on_coin_collector(tmp_path):
    from algos.train import main

    out = tmp_path / "run"
    flags = ["--env", "TextWorld-CoinCollector-v0", "--env-kwargs", "level", "3", "num_games", "3", "num_held_out", "2",
             "--iterations", "1", "--num-groups", "2", "--group-size", "2", "--sft-steps", "2", "--sft-episodes", "2",
             "--eval-episodes", "2", "--max-new-tokens", "8", "--max-extra-groups", "2", "--output-dir", str(out),
             *COLD_UPDATES]  # fmt: skip
    assert main(flags) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = next(r for r in rows if "rollout/success_rate" in r)
    assert train["rollout/env_errors"] == 0 and train["gigpo/anchor_group_size_mean"] >= 1
    assert train["rollout/prompt_tokens"] > 50  # the textworld template: goal, step, observation, commands
    assert any("eval/success_rate" in r for r in rows)
    record = json.loads((out / "transcripts.jsonl").read_text().splitlines()[0])
    assert "coin" in record["task"]
    config = (out / "config.yaml").read_text()
    assert "num_games" in config


PDDL_DOMAIN = """(define (domain fetch)
  (:requirements :typing)
  (:types room object agent)
  (:predicates (at ?a - agent ?r - room) (in ?o - object ?r - room) (holds ?a - agent ?o - object)
               (door ?r1 - room ?r2 - room))
  (:action GotoRoom
    :parameters (?a - agent ?from - room ?to - room)
    :precondition (and (at ?a ?from) (door ?from ?to))
    :effect (and (at ?a ?to) (not (at ?a ?from))))
  (:action PickupObject
    :parameters (?a - agent ?o - object ?r - room)
    :precondition (and (at ?a ?r) (in ?o ?r))
    :effect (and (holds ?a ?o) (not (in ?o ?r)))))"""
PDDL_PROBLEM = """(define (problem fetch1) (:domain fetch)
  (:objects robot - agent hall kitchen garden - room ball - object)
  (:init (at robot hall) (in ball garden) (door hall kitchen) (door kitchen hall) (door kitchen garden)
         (door garden kitchen))
  (:goal (holds robot ball)))"""
PDDL_GRAMMAR = '''
action GotoRoom { template :: "go to [{to}]"; feedback :: "#GotoRoom.feedback#"; }
action PickupObject { template :: "take [{o}]"; feedback :: "#PickupObject.feedback#"; }
grammar :: """
{
    "intro": [{"rhs": "You are in the hall. Your task is to: put the ball in your hands."}],
    "GotoRoom.feedback": [{"rhs": "You arrive at the {to.name}."}],
    "PickupObject.feedback": [{"rhs": "You take the {o.name}."}]
}
""";
'''


def test_pddl_games_as_alfworld_ships_them(tmp_path):
    pytest.importorskip("fast_downward")
    game = tmp_path / "fetch" / "game.tw-pddl"
    game.parent.mkdir()
    game.write_text(json.dumps({"pddl_domain": PDDL_DOMAIN, "pddl_problem": PDDL_PROBLEM, "grammar": PDDL_GRAMMAR}))
    env = gym.make("TextWorld-Games-v0", games_dir=str(tmp_path), held_out_fraction=0.0)
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert info["task"] == "put the ball in your hands." and info["admissible_commands"] == ["go to kitchen"]
    start = info["state_key"]
    obs, r, term, trunc, info = env.step("go to garden")  # not possible from the hall
    assert obs == "Nothing happens." and not info["action_valid"] and info["state_key"] == start
    env.step("go to kitchen")
    assert env.step("go to hall")[4]["state_key"] == start  # back where it started: the same key
    total = 0.0
    while True:
        assert info["expert_action"] in info["admissible_commands"]  # TextWorld's replan, brackets removed
        obs, r, term, trunc, info = env.step(info["expert_action"])
        total += r
        if term or trunc:
            break
    assert term and info["won"] and total == 1.0 and obs == "You take the ball."
