"""Contradictions are stated: an option that the run's other settings make inert gets one `note:` line naming
it, its value and the setting (algos/validate.py INERT, one case per rule: a config that fires it, and the same
options in the mode that uses them, which does not); a flag tyro cannot read is one `error:` line (exit 2);
`scripts.evaluate` says when a checkpoint plays another env than it was trained on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from algos.cli import parse_config
from algos.config import HINTS, Config, flat, from_flat
from algos.train import main as train_main
from algos.validate import INERT, inert_notes
from scripts.evaluate import main as evaluate_main

ROOT = Path(__file__).resolve().parent.parent

# One case per row of INERT, in its order: (the row's options set off their defaults, the settings that make
# them inert, the settings that use them).
CASES = [
    ({"memory": 3}, {"context": "chat"}, {}),
    ({"memory": 3}, {"env": "Arithmetic-v0"}, {"env": "KeyDoor-v0"}),
    ({"max_context_tokens": 8192}, {}, {"context": "chat"}),
    ({"max_prompt_tokens": 2048}, {"context": "chat"}, {}),
    ({"top_p": 0.9}, {"temperature": 0.0}, {}),
    ({"generation_batch_size": 64}, {"backend": "vllm"}, {}),
    ({"vllm_gpu_memory_utilization": 0.3, "vllm_kv_cache_gib": 2.0, "vllm_max_model_len": 4096, "vllm_enforce_eager": True,
      "vllm_tensor_parallel_size": 2, "vllm_sleep": True, "vllm_lora_sync": "merged"},
     {}, {"backend": "vllm", "device": "cuda", "lora_rank": 8}),
    ({"sync_check_every": 2, "sync_probe_size": 4, "sync_tolerance": 0.01}, {}, {"backend": "vllm"}),
    ({"vllm_gpu_memory_utilization": 0.3}, {"backend": "vllm", "device": "cpu"}, {"backend": "vllm", "device": "cuda"}),
    ({"vllm_lora_sync": "merged"}, {"backend": "vllm"}, {"backend": "vllm", "lora_rank": 8}),
    ({"sync_probe_size": 4, "sync_tolerance": 0.01}, {"backend": "vllm", "sync_check_every": 0}, {"backend": "vllm"}),
    ({"explore_frac": 0.5, "stale_after": 5}, {"task_sampler": "uniform"}, {}),
    ({"max_extra_groups": 2}, {"dynamic_sampling": False}, {}),
    ({"group_size_min": 4, "group_size_max": 12, "no_success_target": 0.2}, {}, {"adaptive_group_size": True}),
    ({"reward_tolerance": 0.01}, {}, {"reward": "numeric"}),
    ({"reward_regex": "yes"}, {"reward": "numeric"}, {"reward": "numeric,regex=0.1"}),
    ({"rubric": "rubric.yaml"}, {"reward": "numeric"}, {"reward": "rubric"}),
    ({"judge_model": "tiny", "judge_prompt": "judge.txt", "judge_mode": "generate", "judge_batch_size": 8}, {},
     {"reward": "env,judge=0.5"}),
    ({"audit_honeypots": 32, "probe_threshold": 0.2}, {"audit_every": 0}, {}),
    ({"gamma": 0.9, "omega": 0.5}, {"algo": "grpo"}, {}),
    ({"anchor": "similarity", "similarity_threshold": 0.8}, {"algo": "rloo"}, {}),
    ({"similarity_threshold": 0.8}, {}, {"anchor": "similarity"}),
    ({"norm": "mean", "episode_baseline": "trajectory", "scale": "batch"}, {"algo": "rloo"}, {"algo": "grpo"}),
    ({"scale": "batch"}, {"norm": "mean"}, {}),
    ({"penalty_placement": "return"}, {"invalid_penalty": 0.0}, {}),
    ({"kl_estimator": "k1"}, {}, {"beta": 0.01}),
    ({"rollout_is_mode": "mask", "rollout_is_cap": 3.0}, {"rollout_is": "off"}, {"rollout_is": "token"}),
    ({"share_prompts": False}, {"gradient_checkpointing": True}, {}),
    ({"lora_alpha": 16.0, "lora_dropout": 0.05, "lora_target_modules": "q_proj,v_proj"}, {}, {"lora_rank": 8}),
    ({"sft_episodes": 100, "sft_batch_size": 32, "sft_lr": 1e-4, "sft_noise": 0.1}, {"sft_steps": 0}, {"sft_steps": 50}),
    ({"eval_every": 4}, {"eval_episodes": 0}, {}),
    ({"transcripts": 3}, {"transcript_every": 0}, {}),
    ({"transcript_every": 2}, {"transcripts": 0}, {}),
    ({"wandb_project": "p", "wandb_entity": "e", "wandb_name": "n"}, {}, {"report_to": "tensorboard,wandb"}),
]  # fmt: skip


def notes_by_option(cfg: Config) -> dict[str, str]:
    """inert_notes(cfg) keyed by the option each names first (`--memory 3 ...`, `--no-share-prompts ...`)."""
    out = {}
    for note in inert_notes(cfg):
        flag = note.split()[0].removeprefix("--")
        name = flag.replace("-", "_") if flag.replace("-", "_") in HINTS else flag.removeprefix("no-").replace("-", "_")
        out[name] = note
    return out


def test_every_rule_has_a_case():
    assert [tuple(values) for values, _, _ in CASES] == [names for names, _, _ in INERT]


@pytest.mark.parametrize(("rule", "case"), list(zip(INERT, CASES)), ids=[" ".join(r[0]) for r in INERT])
def test_an_inert_option_gets_a_note_naming_it_its_value_and_the_setting(rule, case):
    names, _, why = rule
    values, inert, used = case
    cfg = from_flat({**values, **inert})
    notes = notes_by_option(cfg)
    for name, value in values.items():
        note = notes[name]
        assert note.endswith(f"has no effect {why.format(**flat(cfg))}") and "\n" not in note
        if HINTS[name] is not bool:
            assert note.startswith(f"--{name.replace('_', '-')} {value:g}" if isinstance(value, float) else
                                   f"--{name.replace('_', '-')} {value}")  # fmt: skip
    cfg = from_flat({**values, **used})
    reason = why.format(**flat(cfg))
    assert not [n for name, n in notes_by_option(cfg).items() if name in names and n.endswith(reason)]


def test_the_defaults_and_every_shipped_preset_are_quiet():
    assert inert_notes(Config()) == []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        assert inert_notes(parse_config(["--config", str(path)])) == [], path.name


def test_train_prints_each_note_on_a_fresh_run(monkeypatch, tmp_path, capsys):
    import algos.train

    monkeypatch.setattr(algos.train, "train", lambda cfg, resume=None: None)  # the config's notes, not a run
    flags = ["--context", "chat", "--memory", "3", "--max-prompt-tokens", "512", "--output-dir", str(tmp_path / "run")]
    assert train_main(flags) == 0
    assert capsys.readouterr().err.splitlines() == [
        "note: --memory 3 has no effect with --context chat (each prompt is the whole conversation so far)",
        "note: --max-prompt-tokens 512 has no effect with --context chat (a conversation is capped by "
        "--max-context-tokens)",
    ]


# ---- a flag tyro cannot read: one error line, exit 2 ----------------------------------------------
@pytest.mark.parametrize(("argv", "line"), [
    (["--iterations", "abc"], "--iterations: 'abc' is not an integer"),
    (["--lr", "fast"], "--lr: 'fast' is not a number"),
    (["--clip-ratio-c", "x"], "--clip-ratio-c: 'x' is not None or a number"),
    (["--overwrite", "yes"], "--overwrite is a switch and takes no value (got 'yes'): pass --overwrite or --no-overwrite"),
    (["--iteratons", "5"], "unknown option --iteratons; did you mean --iterations?"),
    (["--memroy", "2", "--seed", "1"], "unknown option --memroy; did you mean --memory?"),
    (["--xyzzy", "1"], "unknown option --xyzzy (python -m algos.train --help)"),
    (["--vllm-enforce-eager", "maybe"], "--vllm-enforce-eager: 'maybe' is not one of "),
    (["--seed", "1", "--iterations"], "--iterations needs a value"),
    (["--lr", "1e-4", "2e-4"], "unexpected value '2e-4': each flag takes one value"),
])  # fmt: skip
def test_a_flag_tyro_cannot_read_is_one_error_line(argv, line, capsys):
    assert train_main(argv) == 2
    (err,) = capsys.readouterr().err.splitlines()
    assert err.startswith(f"error: {line}"), err


def test_help_is_tyros_own(capsys):
    with pytest.raises(SystemExit) as e:
        train_main(["--help"])
    out, err = capsys.readouterr()
    assert e.value.code == 0 and out.startswith("usage: python -m algos.train") and "--iterations INT" in out
    assert err == ""


# ---- scripts.evaluate: a checkpoint played on another env than its own ---------------------------
def test_evaluate_notes_another_env_than_the_checkpoints(tiny_path, tmp_path, capsys):
    """The checkpoint's trainer_state.pt holds its training config; a plain model folder has none (no note).
    `--baselines warm` (no iter_0 beside it) stops each evaluation right after the checks: no model loads."""
    import torch

    ckpt = tmp_path / "checkpoints" / "iter_2"
    shutil.copytree(tiny_path, ckpt)
    config = flat(from_flat({"env": "KeyDoor-Easy-v0", "env_kwargs": {"width": "4"}}))
    torch.save({"iteration": 2, "config": config}, ckpt / "trainer_state.pt")
    stop = ["--baselines", "warm", "--output", str(tmp_path / "r.json")]
    cases = [
        (ckpt, ["--env", "KeyDoor-v0"], f"note: {ckpt} was trained on KeyDoor-Easy-v0 (width=4); it plays KeyDoor-v0 "
                                        "(no env kwargs) here"),
        (ckpt, ["--env", "KeyDoor-v0", "--env-kwargs", "width=4"], f"note: {ckpt} was trained on KeyDoor-Easy-v0; it "
                                                                  "plays KeyDoor-v0 here"),
        (ckpt, [], None),  # its own env
        (tiny_path, ["--env", "KeyDoor-v0"], None),  # a plain model folder: no training config
    ]  # fmt: skip
    for path, flags, note in cases:
        assert evaluate_main(["--checkpoint", str(path), *flags, *stop]) == 2
        lines = capsys.readouterr().err.splitlines()
        assert lines[-1].startswith("error:") and lines[:-1] == ([note] if note else []), lines
