"""End-to-end: the real entry point, tiny budgets, the run-directory contract."""

import json
from pathlib import Path

import gymnasium as gym
import pytest
import yaml
from cold_start import COLD_UPDATES
from transformers import AutoModelForCausalLM, AutoTokenizer

from algos.run_dir import read_held_out
from algos.train import main
from envs import TextEnv

ROOT = Path(__file__).resolve().parent.parent
CONTRACT_KEYS = [
    "rollout/success_rate", "rollout/episode_return", "rollout/episode_length",
    "rollout/invalid_action_rate", "rollout/frac_zero_std_groups", "gigpo/anchor_group_size_mean",
    "gigpo/singleton_frac", "train/loss", "train/kl", "train/clip_frac", "train/entropy",
    "train/grad_norm", "time/iteration_s", "time/generate_s", "time/train_s", "time/wall_s", "time/rollout_s",
    "time/env_s", "time/prompt_s", "time/advantage_s",
]  # fmt: skip
NO_SFT = ["--num-groups", "2", "--group-size", "2", "--eval-episodes", "2", "--max-new-tokens", "8",
          "--max-extra-groups", "2"]  # fmt: skip
TINY_RUN = [*NO_SFT, "--sft-steps", "2", "--sft-episodes", "3"]


@pytest.fixture(scope="module")
def warm(tmp_path_factory) -> Path:
    """One run's warm-up, shared: long enough for some valid actions (with none, every group's advantages are
    zero and no update runs). Its checkpoint iter_0 is the warmed-up model."""
    out = tmp_path_factory.mktemp("warm") / "run"
    enough = ["--sft-steps", "40", "--sft-episodes", "8", "--group-size", "4"]
    assert main(["--iterations", "1", "--output-dir", str(out), *TINY_RUN, *enough]) == 0
    assert "sft/loss" in (out / "metrics.jsonl").read_text()
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo",
    [
        ["gigpo"],
        ["grpo"],
        ["rloo"],
        ["gigpo", "--anchor", "similarity", "--scale", "batch"],
        [
            "grpo",
            "--importance-sampling-level",
            "sequence",
            "--clip-ratio-c",
            "3",
            "--kl-estimator",
            "k2",
            "--beta",
            "0.01",
            "--entropy-coef",
            "0.01",
        ],
    ],
    ids=" ".join,
)
def test_one_iteration_writes_the_run_directory_contract(tmp_path, algo, warm):
    out = tmp_path / "run"
    # from the shared warm-up's checkpoint: a trainer checkpoint is already warm, so no SFT runs here
    flags = ["--model", str(warm / "checkpoints" / "iter_0"), "--group-size", "4", *NO_SFT]
    assert main(["--algo", *algo, "--iterations", "1", "--output-dir", str(out), *flags]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert not any("sft/loss" in r for r in rows)
    rl = [r for r in rows if r["iteration"] == 1 and "train/loss" in r]
    assert len(rl) == 1
    for key in CONTRACT_KEYS:
        assert rl[0][key] is not None, key
    assert 0.0 <= rl[0]["rollout/success_rate"] <= 1.0
    assert any("eval/success_rate" in r for r in rows if r["iteration"] == 0)  # of the starting model
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["algo"] == algo[0]
    assert saved["penalty_placement"] == ("return" if algo[0] == "rloo" else "step")  # auto, resolved and recorded
    assert list(out.glob("events.out.tfevents.*"))
    assert (out / "transcripts.jsonl").read_text().strip()
    ckpt = out / "checkpoints" / "iter_1"
    assert (ckpt / "model.safetensors").exists() and (ckpt / "trainer_state.pt").exists()
    AutoModelForCausalLM.from_pretrained(ckpt)
    AutoTokenizer.from_pretrained(ckpt)


@pytest.mark.slow
def test_training_continues_from_a_checkpoint(tmp_path):
    first = tmp_path / "first"
    assert main(["--iterations", "2", "--eval-every", "1", "--output-dir", str(first), *TINY_RUN]) == 0
    rows = [json.loads(line) for line in (first / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if "eval/success_rate" in r] == [0, 1, 2]
    ckpt = first / "checkpoints" / "iter_2"
    second = tmp_path / "second"
    assert main(["--model", str(ckpt), "--iterations", "1", "--output-dir", str(second), *NO_SFT]) == 0
    resolved = yaml.safe_load((second / "config.yaml").read_text())
    assert resolved["model"] == str(ckpt) and resolved["sft_steps"] == 0  # already warmed up
    assert "sft/loss" not in (second / "metrics.jsonl").read_text()
    assert (second / "checkpoints" / "iter_1" / "model.safetensors").exists()


@pytest.mark.slow
def test_too_few_informative_samples_are_held_or_dropped_and_held_ones_survive_a_resume(tmp_path):
    import torch

    held = tmp_path / "held"
    flags = ["--iterations", "2", "--save-every", "1", "--min-update-samples", "100000", *TINY_RUN, *COLD_UPDATES]
    assert main([*flags, "--output-dir", str(held)]) == 0
    rows = [json.loads(line) for line in (held / "metrics.jsonl").read_text().splitlines()]
    it = [r for r in rows if "train/update_skipped" in r]
    assert [r["train/update_skipped"] for r in it] == [1.0, 1.0] and not any("train/loss" in r for r in rows)
    assert 0 < it[0]["train/held_samples"] < it[1]["train/held_samples"]  # the second batch joined the first
    state = torch.load(held / "checkpoints" / "iter_2" / "trainer_state.pt", weights_only=True)
    assert len(state["loop"]["held"][0]) == it[1]["train/held_samples"]  # one rank's rows
    # resumed with a threshold it now meets: the held samples and the new batch are trained on together
    assert main(["--resume", str(held), "--iterations", "3", "--min-update-samples", "1"]) == 0
    last = [json.loads(line) for line in (held / "metrics.jsonl").read_text().splitlines()][-3:]
    third = next(r for r in last if r["iteration"] == 3 and "train/update_skipped" in r)
    assert third["train/update_skipped"] == 0.0 and third["train/informative_samples"] > 0

    dropped = tmp_path / "dropped"
    assert main([*flags, "--short-batch", "skip", "--output-dir", str(dropped)]) == 0
    rows = [json.loads(line) for line in (dropped / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/held_samples"] for r in rows if "train/held_samples" in r] == [0.0, 0.0]


class _Echo(TextEnv):
    """A minimal user env: no expert, no admissible list; won by saying 'done'."""

    task = "Say done."

    def _reset_state(self):
        self.turns = 0

    def _apply(self, command):
        self.turns += 1
        self._won = command == "done"
        return ("Well done." if self._won else "Say done."), float(self._won), True

    def _describe(self):
        return f"Turn {self.turns}."

    def _state_key(self):
        return f"turn={self.turns}"


gym.register(id="EchoNoExpert-v0", entry_point=_Echo, max_episode_steps=3)


def test_env_without_expert_or_admissible_commands(tmp_path, capsys):
    flags = ["--env", "EchoNoExpert-v0", "--iterations", "1", *TINY_RUN]
    assert main([*flags, "--output-dir", str(tmp_path / "a")]) == 2  # warm-up needs an expert
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "--sft-steps 0" in err
    assert main([*flags, "--sft-steps", "0", "--output-dir", str(tmp_path / "b")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    (it,) = [r for r in rows if r["iteration"] == 1 and "rollout/success_rate" in r]
    # an untrained model rarely says "done": it updates exactly when some group's advantages differ,
    # and otherwise says that every group's were zero and skips the update
    informative = it["data/frac_uninformative_groups"] < 1.0
    assert ("train/loss" in it) == informative
    assert it.get("train/update_skipped", 0.0) == (0.0 if informative else 1.0)


def test_the_loop_state_moves_only_in_advance_by_hand_computed_counts():
    """LoopState.advance: env steps add up over the collected groups, held samples are replaced, a run of
    updates whose every step was non-finite counts up (a finite one ends it, a held batch leaves it), and
    each reward source's run of failed iterations grows on True, ends on False, stays on None."""
    from algos.collector import Step, Trajectory
    from algos.distributed import SINGLE
    from algos.logprobs import Sample
    from algos.run import Batch, LoopState, Update

    def batch(lengths: list[int], failed: dict) -> Batch:
        step = dict(group_id=0, state_key="room", observation="obs", prompt_ids=[1], response_ids=[2],
                    rollout_logprobs=[-0.1], response="a", action="a", parse_status="ok", action_valid=True,
                    reward=0.0, terminated=False, truncated=False, won=False)  # fmt: skip
        trajs = [Trajectory(0, i, 0, "", [Step(traj_id=i, t=t, **step) for t in range(n)]) for i, n in enumerate(lengths)]
        return Batch(trajs, trajs, {}, [s for t in trajs for s in t.steps], {0}, {}, failed)

    held = [Sample([1], [2], 0.5, [-0.1])]
    loop = LoopState()
    loop.advance(1, batch([3, 2], {"judge": True}), Update(True, [], {}, non_finite=True))
    assert (loop.iteration, loop.env_steps, loop.bad_updates, loop.failed_rewards) == (1, 5, 1, {"judge": 1})
    loop.advance(2, batch([4], {"judge": None}), Update(False, held, {}))  # held: no update ran
    assert (loop.env_steps, loop.bad_updates, loop.held, loop.failed_rewards) == (9, 1, held, {"judge": 1})
    loop.advance(3, batch([1, 1], {"judge": True}), Update(True, [], {}, non_finite=True))
    assert (loop.bad_updates, loop.held, loop.failed_rewards) == (2, [], {"judge": 2})
    loop.advance(4, batch([2], {"judge": False}), Update(True, [], {}))
    assert (loop.iteration, loop.env_steps, loop.bad_updates, loop.failed_rewards) == (4, 13, 0, {"judge": 0})
    again = LoopState.from_dict(4, loop.to_dict(SINGLE), SINGLE)  # a checkpoint's "loop" entry, one unit
    assert (again.iteration, again.env_steps, again.bad_updates, again.failed_rewards) == (4, 13, 0, {"judge": 0})


@pytest.mark.slow
def test_a_named_env_says_which_preset_it_brings_and_the_run_ends_with_rls_lift(tmp_path, capsys):
    """The note names the preset; a flag still wins over it (--sft-steps 0 against sokoban.yaml's 90); the
    last line pairs the final evaluation with the one before RL, task by task."""
    out = tmp_path / "run"
    assert main(["--env", "Sokoban-v0", "--iterations", "1", "--sft-steps", "0", "--output-dir", str(out), *NO_SFT]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert "note: --env Sokoban-v0 brings configs/sokoban.yaml (a flag or --config still wins)" in err
    assert yaml.safe_load((out / "config.yaml").read_text())["sft_steps"] == 0
    assert err[-1].startswith("RL's lift over the start: ")
    assert err[-1].endswith("(2 held-out tasks, one episode each before and after)")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    lift = next(r for r in rows if "eval/rl_lift" in r)
    assert lift["iteration"] == 1 and lift["eval/rl_lift_low"] <= lift["eval/rl_lift"] <= lift["eval/rl_lift_high"]
    held = read_held_out(out)  # each evaluation's episodes, what the lift paired
    evals = {r["iteration"]: r["eval/success_rate"] for r in rows if "eval/success_rate" in r}
    assert sorted(held) == [0, 1] and all(held[it]["task"] == [10**9, 10**9 + 1] for it in held)
    assert {it: sum(h["won"]) / 2 for it, h in held.items()} == evals
    assert lift["eval/rl_lift"] == 50 * (sum(held[1]["won"]) - sum(held[0]["won"]))
    assert all(1 <= n <= 30 for h in held.values() for n in h["steps"])  # Sokoban level 1's 30-step limit


def test_iterations_0_runs_the_warm_up_alone_evaluated_and_saved(tmp_path, capsys):
    """An SFT-only run (the control an RL run is held against): the warm-up, one held-out evaluation and
    iter_0, no RL iteration; without SFT steps there is nothing to train, which is said in one line."""
    out = tmp_path / "sft"
    assert main([*TINY_RUN, "--iterations", "0", "--output-dir", str(out)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"checkpoint: {out / 'checkpoints' / 'iter_0'}"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {r["iteration"] for r in rows} == {0} and not any("data/env_steps_total" in r for r in rows)
    assert [r["iteration"] for r in rows if "eval/success_rate" in r] == [0]
    assert list(read_held_out(out)) == [0] and (out / "checkpoints/iter_0/trainer_state.pt").is_file()
    assert main([*NO_SFT, "--iterations", "0", "--sft-steps", "0", "--output-dir", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --iterations 0 runs the SFT warm-up alone")
