"""Every bad input is one line (issue 22): `python -m algos.train` with a broken preset, a value of the
wrong type, a broken env or reward module, or a scorer that always fails, gives its exit code, exactly
one `error:` line on stderr and no traceback, and leaves no run directory (a run stopped by its scorer
keeps its weights). Then the pieces by hand: the config's type checks, the scorer's errors and the
metrics reader that tolerates a line cut by a kill. Each bad input is checked once: through a process
where the process is the point (its exit code, stderr, nothing written), in-process for the config
mistakes that stop a run before anything loads."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from algos.cli import load_preset
from algos.config import Config, ConfigError, check_types, from_flat, typed
from algos.run_dir import read_metrics
from algos.train import main as train_main
from algos.validate import validate
from rewards.base import FunctionScorer, RewardItem, score_batch
from rewards.layer import RewardLayer
from scripts.plot import main as plot_main

ROOT = Path(__file__).resolve().parent.parent

MODULES = {  # written into tmp_path, which is put on PYTHONPATH: --env badenvs:..., --reward scorers:...
    "badenvs.py": """
import gymnasium as gym

from envs.keydoor import KeyDoorEnv


class RaisingReset(KeyDoorEnv):
    def reset(self, *, seed=None, options=None):
        raise RuntimeError("no world today")


class NumberObs(KeyDoorEnv):
    def reset(self, *, seed=None, options=None):
        return 42, super().reset(seed=seed, options=options)[1]


class ListInfo(KeyDoorEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, [info]


for cls in (RaisingReset, NumberObs, ListInfo):
    gym.register(id=f"{cls.__name__}-v0", entry_point=cls, max_episode_steps=20)
""",
    "scorers.py": """
def raises(item):
    raise RuntimeError("scorer bug")


def nan(item):
    return float("nan")


def inf(item):
    return float("inf")


def text(item):
    return "1.0"
""",
    "boom_on_import.py": 'raise RuntimeError("broken at import")\n\n\ndef fn(item):\n    return 1.0\n',
    "syntax_error.py": "def fn(item:\n    return 1.0\n",
    "malformed.yaml": "iterations: [1, 2\nseed: 3\n",
    "iterations_abc.yaml": "iterations: abc\n",
    "lr_text.yaml": 'lr: "fast"\n',
    "device_int.yaml": "device: 3\n",
    "iterations_float.yaml": "iterations: 2.5\n",
    "lr_inf.yaml": "learner:\n  lr: .inf\n",
}

RUN = ["--output-dir", "run", "--device", "cpu"]
TINY = ["--env", "Arithmetic-v0", "--iterations", "4", "--num-groups", "2", "--group-size", "2", "--sft-steps", "0", "--eval-episodes", "0",
        "--max-new-tokens", "4", "--max-extra-groups", "0", "--audit-every", "0",
        "--max-failed-reward-iterations", "2"]  # fmt: skip

# (id, flags, exit code, what the error line says)
CASES = [
    ("malformed-yaml", ["--config", "malformed.yaml"], 2, "malformed.yaml, line 2: not valid YAML"),
    ("yaml-int-text", ["--config", "iterations_abc.yaml"], 2, "iterations must be an integer (got 'abc')"),
    ("yaml-float-text", ["--config", "lr_text.yaml"], 2, "lr must be a finite number (got 'fast')"),
    ("yaml-str-int", ["--config", "device_int.yaml"], 2, "device must be a string (got 3)"),
    ("yaml-int-float", ["--config", "iterations_float.yaml"], 2, "iterations must be an integer (got 2.5)"),
    ("yaml-inf", ["--config", "lr_inf.yaml"], 2, "lr must be a finite number (got inf)"),
    ("flag-nan", ["--lr", "nan"], 2, "lr must be a finite number (got nan)"),
    ("algo-unknown", ["--algo", "ppo"], 2, "unknown algo 'ppo'; choose one of: grpo, gigpo, rloo"),
    ("flag-inf-optional", ["--clip-ratio-c", "inf"], 2, "clip_ratio_c must be a finite number or null (got inf)"),
    ("report-to-unknown", ["--report-to", "tensorboard,mlflow"], 2, "--report-to 'tensorboard,mlflow': unknown reporter mlflow"),
    ("reset-raises", ["--env", "badenvs:RaisingReset-v0"], 2,
     "--env badenvs:RaisingReset-v0: reset(seed=0) raised RuntimeError: no world today"),
    ("reset-obs-not-str", ["--env", "badenvs:NumberObs-v0"], 2,
     "--env badenvs:NumberObs-v0: reset(seed=0) returned an observation of type int (42)"),
    ("reset-info-not-dict", ["--env", "badenvs:ListInfo-v0"], 2,
     "--env badenvs:ListInfo-v0: reset(seed=0) returned an info of type list"),
    ("reward-import-raises", ["--reward", "boom_on_import:fn"], 2,
     "--reward boom_on_import:fn: importing 'boom_on_import' raised RuntimeError: broken at import"),
    ("reward-syntax-error", ["--reward", "syntax_error:fn"], 2,
     "--reward syntax_error:fn: importing 'syntax_error' raised SyntaxError"),
    ("scorer-raises", [*TINY, "--reward", "scorers:raises"], 1, "RuntimeError: scorer bug"),
    ("scorer-nan", [*TINY, "--reward", "scorers:nan"], 1, "non-finite score nan"),
    ("scorer-inf", [*TINY, "--reward", "scorers:inf"], 1, "non-finite score inf"),
    ("scorer-text", [*TINY, "--reward", "scorers:text"], 1, "score '1.0' is str, not a number"),
]  # fmt: skip


def train(cwd: Path, flags: list[str]) -> subprocess.CompletedProcess:
    for name, text in MODULES.items():
        (cwd / name).write_text(text)
    path = os.pathsep.join(p for p in (str(cwd), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", "algos.train", *flags, *RUN], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


BAR = re.compile(r"^.*?\| *\d+/\d+ \[[^\]]*\]")  # a tqdm redraw: "desc:  25%|██▌  | 1/4 [00:17<00:53, ...]"


def stderr_lines(err: str) -> list[str]:
    """stderr as lines, without the progress bar's redraws (a note may follow a redraw on its line)."""
    return [rest for line in err.splitlines() if (rest := BAR.sub("", line)).strip()]


@pytest.mark.slow  # a training process per row
@pytest.mark.parametrize("case, flags, code, needle", CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_line(case, flags, code, needle, tmp_path, tiny_path):
    result = train(tmp_path, flags)
    lines = stderr_lines(result.stderr)
    errors = [line for line in lines if line.startswith("error:")]
    assert result.returncode == code, result.stderr
    assert len(errors) == 1 and needle in errors[0], result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    run = tmp_path / "run"
    if code == 2:  # a user mistake, found before anything is written
        assert not run.exists()
        return
    # a scorer that fails on every response: noted once, stopped after 2 iterations, the weights saved
    source = flags[-1].split(":")[-1]
    assert "failed on every response for 2 iterations in a row" in errors[0]
    assert sum(line.startswith(f"note: --reward {source}:") for line in lines) == 1, result.stderr
    assert (run / "checkpoints" / "iter_2" / "model.safetensors").is_file()
    assert "saved in run/checkpoints/iter_2" in errors[0]
    rows = [r for r in read_metrics(run) if f"reward/{source}/errors" in r]
    assert [r["iteration"] for r in rows] == [1, 2] and all(r[f"reward/{source}/errors"] > 0 for r in rows)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--env", "KeyDor-v0"], "did you mean KeyDoor-v0"),
        (["--env", "nosuchpkg:Thing-v0"], "cannot import 'nosuchpkg'"),
        (["--group-size", "1"], "group_size must be >= 2"),
        (["--ppo-epochs", "0"], "ppo_epochs must be >= 1"),
        (["--prompt-template", "fancy"], "unknown prompt_template 'fancy'"),
        (["--iterations", "-1"], "iterations must be >= 0"),
        (["--model", "./no/such/checkpoint"], "does not exist"),
        (["--config", "configs/nope.yaml"], "not found"),
        (["--kl-estimator", "k4"], "choose one of: k1, k2, k3"),
        (["--clip-ratio-c", "0.5"], "clip_ratio_c must be > 1"),
        (["--importance-sampling-level", "seq"], "choose one of: token, sequence"),
        (["--anchor", "text"], "choose one of: state_key, similarity"),
        (["--rollout-is", "tok"], "choose one of: auto, off, token, sequence"),
        (["--backend", "sglang"], "choose one of: hf, vllm"),
        (["--backend", "vllm", "--device", "cpu", "--vllm-sleep"], "need a GPU"),
        (["--backend", "vllm", "--vllm-max-model-len", "100"], "vllm_max_model_len 100 < max_prompt_tokens"),
        (["--backend", "vllm", "--vllm-gpu-memory-utilization", "1.5"], "must be in (0, 1]"),
        (["--sync-probe-size", "0"], "sync_probe_size >= 1"),
        (["--vllm-lora-sync", "fused"], "choose one of: auto, adapter, merged"),
        (["--backend", "vllm", "--vllm-lora-sync", "adapter"], "needs --lora-rank > 0"),
        (["--rollout-is-cap", "1"], "rollout_is_cap must be > 1"),
        (["--similarity-threshold", "0"], "similarity_threshold must be in (0, 1]"),
        (["--warmup-steps", "-1"], "warmup_steps must be >= 0 (got -1)"),
        (["--max-grad-norm", "0"], "max_grad_norm must be > 0 (got 0.0)"),
        (["--env-kwargs", "level"], "'level' has no value; pass KEY VALUE or KEY=VALUE"),
        (["--algo", "rloo", "--penalty-placement", "step"], "use it with --episode-baseline step and --algo gigpo"),
        (["--penalty-placement", "step", "--episode-baseline", "trajectory"], "use it with --episode-baseline step"),
        (["--penalty-placement", "faulty"], "choose one of: auto, return, step"),
    ],
)
def test_a_config_mistake_is_one_line_and_exit_code_2(capsys, flags, needle, tmp_path):
    """In-process: checked before anything loads, so no process is needed to see it."""
    assert train_main([*flags, "--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err
    assert not (tmp_path / "x").exists()  # nothing was created before the check


def test_backend_vllm_without_vllm_installed_is_one_line(capsys, monkeypatch, tmp_path):
    import agents.vllm_backend

    monkeypatch.setattr(agents.vllm_backend, "vllm_available", lambda: False)
    assert train_main(["--backend", "vllm", "--output-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --backend vllm needs vLLM") and "\n" not in err


# ---- the config's type checks, by hand ------------------------------------------------
@pytest.mark.parametrize("name, value, expected", [
    ("iterations", 3, 3), ("lr", 3, 3.0), ("lr", "1e-4", 1e-4), ("lr", 2.5e-4, 2.5e-4), ("clip_ratio_c", None, None),
    ("sft_steps", None, None), ("sft_steps", 0, 0), ("trust_remote_code", True, True), ("device", "cpu", "cpu"),
    ("env_kwargs", {"level": "5"}, {"level": "5"}),
])  # fmt: skip
def test_a_value_of_the_declared_type_passes(name, value, expected):
    out = typed(name, value)
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize("name, value, message", [
    ("iterations", "abc", "iterations must be an integer (got 'abc')"),
    ("iterations", 2.5, "iterations must be an integer (got 2.5)"),
    ("iterations", True, "iterations must be an integer (got True)"),
    ("iterations", None, "iterations must be an integer (got None)"),
    ("lr", "fast", "lr must be a finite number (got 'fast')"),
    ("lr", float("nan"), "lr must be a finite number (got nan)"),
    ("lr", "-inf", "lr must be a finite number (got -inf)"),
    ("lr", None, "lr must be a finite number (got None)"),
    ("clip_ratio_c", float("inf"), "clip_ratio_c must be a finite number or null (got inf)"),
    ("sft_steps", 1.5, "sft_steps must be an integer or null (got 1.5)"),
    ("device", 3, "device must be a string (got 3)"),
    ("trust_remote_code", "yes", "trust_remote_code must be true or false (got 'yes')"),
    ("env_kwargs", "level=5", "env_kwargs must be a mapping (got 'level=5')"),
])  # fmt: skip
def test_a_value_of_another_type_is_named(name, value, message):
    with pytest.raises(ConfigError) as e:
        typed(name, value)
    assert str(e.value) == message
    with pytest.raises(ConfigError, match=re.escape(message)):
        from_flat({name: value})


def test_yaml_values_are_checked_where_they_enter(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("learner:\n  lr: 1e-4\nepsilon: 1\nclip_ratio_c: null\n")  # PyYAML reads 1e-4 as text
    cfg = from_flat(load_preset(str(preset)))
    assert (cfg.learner.lr, cfg.learner.epsilon, cfg.learner.clip_ratio_c) == (1e-4, 1.0, None)
    preset.write_text("sampling:\n  temperature: .nan\n")
    with pytest.raises(ConfigError, match=r"p\.yaml: temperature must be a finite number \(got nan\)"):
        load_preset(str(preset))
    preset.write_text("seed: 1\n\tlr: 2\n")
    with pytest.raises(ConfigError, match=r"p\.yaml, line 2: not valid YAML"):
        load_preset(str(preset))


def test_validate_refuses_non_finite_floats_of_a_config_built_in_code():
    base = Config(device="cpu")
    for cfg in (dataclasses.replace(base, workers=dataclasses.replace(base.workers, env_step_timeout=math.inf)),
                dataclasses.replace(base, learner=dataclasses.replace(base.learner, lr=math.nan)),
                dataclasses.replace(base, sft=dataclasses.replace(base.sft, sft_lr=-math.inf))):  # fmt: skip
        with pytest.raises(ConfigError, match="must be a finite number"):
            check_types(cfg)
        with pytest.raises(ConfigError, match="must be a finite number"):
            validate(cfg)


# ---- scorer errors, by hand -----------------------------------------------------------
def test_nan_inf_and_text_scores_are_errors_with_a_reason():
    items = [RewardItem.from_response("q", "<action>1</action>")] * 2
    for returned, reason in ((math.nan, "non-finite score nan"), (math.inf, "non-finite score inf"),
                             ("1.0", "not a number"), (None, "scored None")):  # fmt: skip
        class Fixed:
            name, scope = "fixed", "outcome"

            def score(self, batch, value=returned):
                return [value] * len(batch)

        errors: list[str] = []
        assert score_batch(Fixed(), items, errors) == [None, None]
        assert len(errors) == 2 and reason in errors[0]
        errors = []
        assert score_batch(FunctionScorer("f", lambda it, v=returned: v, needs_answer=False), items, errors) == [None] * 2
        assert len(errors) == 2


def test_the_reward_layer_notes_the_first_error_once_and_says_which_sources_failed(capsys):
    def flaky(item):
        if item.response == "bad":
            raise RuntimeError("cannot score this")
        return 1.0

    layer = RewardLayer([(FunctionScorer("flaky", flaky, needs_answer=False), 1.0),
                         (FunctionScorer("audited", lambda it: 1 / 0, needs_answer=False), 0.0)])  # fmt: skip
    bad, good = RewardItem.from_response("q", "bad"), RewardItem.from_response("q", "good")
    failed = []
    for episodes in ([[bad]], [[bad], [bad]], [], [[bad], [good]], [[bad]]):
        layer.score_episodes(episodes)
        failed.append(layer.failed(layer.metrics())["flaky"])
    assert failed == [True, True, None, False, True]  # nothing to score: None; one good score: False
    assert layer.failed({})["audited"] is False  # weight 0: noted, never stops a run
    notes = capsys.readouterr().err.splitlines()
    assert notes == ["note: --reward flaky: a response it fails on scores 0 (first: RuntimeError: cannot score "
                     "this); see reward/flaky/errors",
                     "note: --reward audited: a response it fails on scores 0 (first: ZeroDivisionError: division "
                     "by zero); see reward/audited/errors"]  # fmt: skip


# ---- metrics.jsonl: a line cut by a kill ----------------------------------------------
def write_rows(run: Path, tail: str = "") -> None:
    run.mkdir(exist_ok=True)
    rows = [{"iteration": i, "rollout/success_rate": i / 4, "train/loss": 0.1 * i} for i in range(1, 4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)


def test_a_cut_last_line_is_skipped_with_a_note(tmp_path, capsys):
    run = tmp_path / "run"
    write_rows(run, '{"iteration": 4, "rollout/succ')
    assert [r["iteration"] for r in read_metrics(run)] == [1, 2, 3]
    err = capsys.readouterr().err
    assert err == f"note: {run / 'metrics.jsonl'}: its last line (4) is cut, as a killed run leaves it; skipped\n"
    write_rows(run, "\n\n")  # blank lines are no rows
    assert len(read_metrics(run)) == 3


def test_a_bad_line_elsewhere_names_the_file_and_the_line(tmp_path):
    run = tmp_path / "run"
    write_rows(run, '{"iteration": 4, "rollout/succ\n{"iteration": 5}\n')
    with pytest.raises(ValueError, match=re.escape(f"{run / 'metrics.jsonl'}, line 4: not JSON (Unterminated")):
        read_metrics(run)
    write_rows(run, '[4, 5]\n{"iteration": 5}\n')
    with pytest.raises(ValueError, match=re.escape(f"{run / 'metrics.jsonl'}, line 4: not a metrics row")):
        read_metrics(run)


def test_plot_draws_a_run_cut_by_a_kill(tmp_path, capsys):
    run = tmp_path / "run"
    write_rows(run, '{"iteration": 4, "rollout/succ')
    out = tmp_path / "curves.png"
    assert plot_main([str(run), "--metrics", "rollout/success_rate", "train/loss", "--out", str(out)]) == 0
    assert out.stat().st_size > 0 and "its last line (4) is cut" in capsys.readouterr().err
    write_rows(run, '{"iteration": 4, "rollout/succ\n{"iteration": 5}\n')
    assert plot_main([str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "metrics.jsonl, line 4" in err and "\n" not in err
