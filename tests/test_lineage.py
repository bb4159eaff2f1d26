"""A resumed run stays the run it was (algos/lineage.py): a resume that changes what the run learns is
refused in one line, one that extends or tunes it is recorded in resumes.jsonl, config.yaml is never
rewritten, and `--fork NEW_DIR` continues a run as a new one that names its parent."""

import hashlib
import json
import random
from pathlib import Path

import pytest
import torch
import yaml

from algos import lineage
from algos.cli import parse_config, resume_argv
from algos.config import Config, ConfigError, flat
from algos.train import main

SMALL = ["--num-groups", "2", "--group-size", "4", "--sft-steps", "4", "--sft-episodes", "4", "--eval-episodes", "4",
         "--max-new-tokens", "8", "--max-extra-groups", "1", "--seed", "5", "--transcripts", "1",
         "--save-every", "1"]  # fmt: skip

# (flags, the option they change): each changes what a run learns
IDENTITY = [
    (["--env", "KeyDoor-Easy-v0"], "env"),
    (["--env-kwargs", "max_episode_steps", "9"], "env_kwargs"),
    (["--algo", "grpo"], "algo"),
    (["--seed", "3"], "seed"),
    (["--model", "tiny-qwen2.5"], "model"),
    (["--lr", "0.001"], "lr"),
    (["--beta", "0.01"], "beta"),
    (["--epsilon", "0.1"], "epsilon"),
    (["--context", "chat"], "context"),
    (["--memory", "3"], "memory"),
    (["--action-format", "tool_call"], "action_format"),
    (["--temperature", "0.7"], "temperature"),
    (["--max-new-tokens", "12"], "max_new_tokens"),
    (["--reward", "env:1,format:0.1"], "reward"),
    (["--gamma", "0.9"], "gamma"),
    (["--group-size", "2"], "group_size"),
    (["--task-sampler", "uniform"], "task_sampler"),
    (["--sft-steps", "6"], "sft_steps"),
    (["--dtype", "bfloat16"], "dtype"),
    (["--lora-rank", "4"], "lora_rank"),
]
# ... and each of these only extends or tunes it (kept below the run's --iterations: a resume that is
# finished touches nothing)
CHANGEABLE = [
    (["--eval-every", "3"], "eval_every"),
    (["--eval-episodes", "8"], "eval_episodes"),
    (["--save-every", "2"], "save_every"),
    (["--keep-checkpoints", "2"], "keep_checkpoints"),
    (["--transcripts", "2"], "transcripts"),
    (["--report-to", "none"], "report_to"),
    (["--max-bad-updates", "5"], "max_bad_updates"),
    (["--max-failed-reward-iterations", "5"], "max_failed_reward_iterations"),
    (["--micro-batch-size", "8"], "micro_batch_size"),
    (["--generation-batch-size", "16"], "generation_batch_size"),
    (["--min-update-samples", "2"], "min_update_samples"),
    (["--env-step-timeout", "30"], "env_step_timeout"),
    (["--audit-every", "4"], "audit_every"),
    (["--max-env-steps", "100000"], "max_env_steps"),
]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def saved_run(tmp_path: Path, **values) -> Path:
    """A run directory holding only what a resume reads before it builds anything: config.yaml."""
    run = tmp_path / "run"
    run.mkdir()
    cfg = parse_config(SMALL + ["--output-dir", str(run)])
    (run / "config.yaml").write_text(yaml.safe_dump({**flat(cfg), **values}, sort_keys=False))
    return run


def resumed(run: Path, flags: list[str]) -> dict[str, tuple]:
    argv, resume = resume_argv(["--resume", str(run), *flags])
    return lineage.changes(resume.saved, parse_config(argv, (str(run / "config.yaml"), resume.saved)))


@pytest.mark.parametrize(("flags", "key"), IDENTITY, ids=[k for _, k in IDENTITY])
def test_a_change_of_identity_is_refused_in_one_line_naming_it(tmp_path, flags, key):
    run = saved_run(tmp_path)
    changed = resumed(run, flags)
    assert list(changed) == [key]
    with pytest.raises(ConfigError, match=rf"--resume .*: {key} .* -> .* would change what the run learns") as e:
        lineage.check_resume(run, changed)
    assert "--fork NEW_DIR" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("flags", "key"), CHANGEABLE, ids=[k for _, k in CHANGEABLE])
def test_a_change_that_extends_or_tunes_the_run_is_accepted(tmp_path, flags, key):
    run = saved_run(tmp_path)
    changed = resumed(run, flags)
    assert list(changed) == [key]
    lineage.check_resume(run, changed)  # no error


def test_every_option_is_either_identity_changeable_or_bookkeeping():
    names = set(flat(Config()))
    assert names >= lineage.CHANGEABLE | lineage.BOOKKEEPING  # no stale name in the lists
    identity = set(lineage.identity_keys())
    assert identity == names - lineage.CHANGEABLE - lineage.BOOKKEEPING
    assert identity >= {"env", "env_kwargs", "model", "algo", "context", "action_format", "reward", "lr"}


def test_equal_values_written_differently_are_no_change(tmp_path):
    run = saved_run(tmp_path, env_kwargs={"level": 5})
    assert resumed(run, ["--env-kwargs", "level", "5", "--lr", "1.5e-4", "--seed", "5"]) == {}


def test_the_current_config_is_config_yaml_with_each_resume_applied(tmp_path):
    run = saved_run(tmp_path)
    lineage.record_resume(run, 1, {"iterations": (24, 30)})
    lineage.record_resume(run, 30, {"iterations": (30, 40), "eval_every": (8, 2)})
    with open(run / lineage.RESUMES, "a") as f:
        f.write('{"resumed": "cut by a kil')  # a kill mid-line loses that line only
    saved = lineage.saved_config(run)
    assert (saved["iterations"], saved["eval_every"], saved["env"]) == (40, 2, "KeyDoor-v0")
    assert resumed(run, ["--iterations", "40"]) == {}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fork", "B"], "--fork NEW_DIR continues a run as a new one: pass it with --resume RUN_DIR"),
        (["--resume", "{run}", "--fork", "{run}"], "is the run it continues"),
        (["--resume", "{run}", "--output-dir", "B"], "leave --output-dir out"),
        (["--resume", "{run}", "--overwrite"], "pass one of them"),
        (["--resume", "{run}", "--fork"], "--fork needs a run directory"),
        (["--resume", "{run}", "--fork", "B", "--model", "tiny-qwen2.5"], "model tiny -> tiny-qwen2.5 cannot change"),
        (["--resume", "{run}", "--fork", "B", "--lora-rank", "4"], "lora_rank 0 -> 4 cannot change in a fork"),
    ],
)
def test_fork_and_resume_mistakes_are_one_line(tmp_path, capsys, argv, message):
    run = saved_run(tmp_path)
    assert main([a.format(run=run) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


def test_the_learner_takes_its_own_lr_over_a_checkpoints(tmp_path):
    """A fork that changes lr, weight decay or the warm-up gets them, at the schedule's position."""
    from algos.config import LearnerConfig
    from algos.learner import Learner

    def learner(**kw):
        model = torch.nn.Linear(2, 1)
        return Learner(model, LearnerConfig(rollout_is="off", autocast="off", warmup_steps=4, **kw), pad_id=0)

    parent = learner(lr=1e-3)
    for _ in range(2):  # two steps into a 4-step warm-up: factor 3/4
        parent.optimizer.step()
        parent.scheduler.step()
    child = learner(lr=4e-4, weight_decay=0.1)
    child.load_state(parent.optimizer.state_dict(), parent.scheduler.state_dict())
    assert child.scheduler.last_epoch == 2
    assert child.optimizer.param_groups[0]["lr"] == pytest.approx(4e-4 * 3 / 4)
    assert child.optimizer.param_groups[0]["weight_decay"] == 0.1
    assert child.scheduler.get_last_lr() == [pytest.approx(3e-4)]
    child.scheduler.step()
    assert child.optimizer.param_groups[0]["lr"] == pytest.approx(4e-4)  # the warm-up ends on the new lr
    same = learner(lr=1e-3)  # a plain resume: exactly the saved state
    same.load_state(parent.optimizer.state_dict(), parent.scheduler.state_dict())
    assert same.optimizer.param_groups[0]["lr"] == parent.optimizer.param_groups[0]["lr"]


# ---- real runs: the tiny model, one iteration ---------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("lineage") / "run"
    assert main([*SMALL, "--iterations", "1", "--output-dir", str(run)]) == 0
    return run


@pytest.mark.slow
def test_fuzz_resume_random_changes_are_refused_or_accepted_and_config_yaml_is_kept(finished, capsys):
    """Random subsets of changed settings: refused in one line naming exactly the identity options changed,
    else accepted (the run is finished at its --iterations: nothing to do, nothing written); config.yaml,
    metrics.jsonl and the checkpoints are byte for byte what they were."""
    files = [finished / "config.yaml", finished / "metrics.jsonl", *sorted(finished.glob("checkpoints/*/*"))]
    before = {f: digest(f) for f in files}
    rng = random.Random(0)
    for _ in range(24):
        picked = rng.sample(IDENTITY, rng.choice([0, 0, 1, 2, 3])) + rng.sample(CHANGEABLE, rng.randint(0, 3))
        rng.shuffle(picked)
        flags = [a for f, _ in picked for a in f]
        code = main(["--resume", str(finished), *flags])
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        refused = [k for f, k in picked if (f, k) in IDENTITY]
        if refused:
            assert code == 2 and len(err) == 1 and err[0].startswith("error:"), (flags, err)
            named = err[0].split(" would change")[0]
            assert all(f"{k} " in named for k in refused), (flags, err)
            assert not any(f" {k} " in named for f, k in picked if k not in refused), (flags, err)
        else:
            assert code == 0 and "is finished" in err[-1], (flags, err)
    assert {f: digest(f) for f in files} == before
    assert not (finished / lineage.RESUMES).exists()


@pytest.mark.slow
def test_a_resume_records_what_it_changed_and_a_fork_names_its_parent(finished, tmp_path, capsys):
    run = tmp_path / "run"
    import shutil

    shutil.copytree(finished, run)
    config = digest(run / "config.yaml")
    assert main(["--resume", str(run), "--iterations", "2", "--eval-every", "1"]) == 0
    assert digest(run / "config.yaml") == config
    (row,) = lineage.resume_records(run)
    assert row["from_iteration"] == 1 and row["changed"] == {"iterations": [1, 2], "eval_every": [8, 1]}
    assert "resume changes iterations 1 -> 2, eval_every 8 -> 1" in capsys.readouterr().err
    assert main(["--resume", str(run)]) == 0  # the record holds iterations 2: finished
    assert "iteration 2 of --iterations 2" in capsys.readouterr().err

    parent_files = {f: digest(f) for f in sorted(run.rglob("*")) if f.is_file() and f.name != ".lock"}
    fork = tmp_path / "fork"
    assert main(["--resume", str(run), "--fork", str(fork), "--env", "KeyDoor-Easy-v0", "--iterations", "3",
                 "--lr", "1e-4"]) == 0  # fmt: skip
    assert {f: digest(f) for f in sorted(run.rglob("*")) if f.is_file() and f.name != ".lock"} == parent_files
    record = json.loads((fork / lineage.PARENT).read_text())
    assert record["parent"] == str(run.resolve()) and record["iteration"] == 2
    assert record["changed"] == {
        "env": ["KeyDoor-v0", "KeyDoor-Easy-v0"],
        "iterations": [2, 3],
        "lr": [0.00015, 0.0001],
    }
    assert lineage.saved_config(fork)["env"] == "KeyDoor-Easy-v0"
    assert sorted(p.name for p in (fork / "checkpoints").iterdir()) == ["iter_0", "iter_2", "iter_3"]
    rows = [json.loads(line) for line in (fork / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["iteration"] == 2 and "eval/success_rate" in rows[0]  # another env: the fork's own baseline
    (first,) = [r for r in rows if "rollout/success_rate" in r]
    assert first["iteration"] == 3
    state = torch.load(fork / "checkpoints/iter_3/trainer_state.pt", weights_only=True)
    assert state["config"]["env"] == "KeyDoor-Easy-v0" and state["loop"]["start_at"] == 2
    assert "RL's lift over iteration 2 (the fork's start)" in capsys.readouterr().err.strip().splitlines()[-1]
