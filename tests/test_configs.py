import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from agents.vllm_backend import vllm_available
from algos.cli import key_value_pairs, load_preset, parse_config
from algos.config import SECTIONS, Config, ConfigError, env_kwargs, flat, from_flat
from algos.validate import validate

ROOT = Path(__file__).resolve().parent.parent
PRESETS = sorted(ROOT.joinpath("configs").glob("*.yaml"))


def test_there_are_presets():
    assert PRESETS


# textworld_coin.yaml generates its TextWorld games when validated
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.name == "textworld_coin.yaml" else p
                                  for p in PRESETS], ids=lambda p: p.name)  # fmt: skip
def test_every_preset_loads_and_validates(path):
    cfg = parse_config(["--config", str(path)])
    if "num_games" in cfg.env_kwargs:  # the preset's family and level, with a pool small enough for a test
        cfg.env_kwargs.update(num_games="2", num_held_out="1")
    if cfg.model.count("/") == 1 and not Path(cfg.model).exists():
        # hub models are checked by name only; nothing is downloaded. vllm_sleep is GPU-only, like the
        # preset's device; the rest is checked on the CPU
        cfg = from_flat(dict(model="tiny", device="cpu", vllm_sleep=False), cfg)
    if cfg.engine.backend == "vllm" and not vllm_available():
        cfg = from_flat(dict(backend="hf"), cfg)  # an install without vLLM still checks the rest of the preset
    validate(cfg)


def test_env_kwargs_from_yaml_and_flags_are_read_as_yaml(tmp_path):
    preset = tmp_path / "tw.yaml"
    preset.write_text("env: KeyDoor-v0\nenv_kwargs: {width: 4, compass: false, walls: 0.5}\n")
    cfg = parse_config(["--config", str(preset), "--env-kwargs", "width", "5", "height", "2"])
    assert env_kwargs(cfg) == {"width": 5, "compass": False, "walls": 0.5, "height": 2}  # key by key
    cfg = parse_config(["--config", str(preset)])
    assert env_kwargs(cfg) == {"width": 4, "compass": False, "walls": 0.5}
    with pytest.raises(ConfigError, match="'width' has no value; pass KEY VALUE or KEY=VALUE"):
        parse_config(["--env-kwargs", "width", "--iterations", "2"])


@pytest.mark.parametrize("tokens", [["width", "5", "walls", "0.5"], ["width=5", "walls=0.5"], ["width=5", "walls", "0.5"]])
def test_env_kwargs_read_alike_as_key_value_or_key_equals_value(tokens):
    """The trainer and the scripts (evaluate, audit_rewards) share key_value_pairs: either form, or both."""
    assert key_value_pairs(tokens) == {"width": "5", "walls": "0.5"}
    assert env_kwargs(parse_config(["--env-kwargs", *tokens])) == {"width": 5, "walls": 0.5}


def test_an_env_kwargs_value_may_hold_an_equals_sign():
    assert key_value_pairs(["query", "a=b", "n=2"]) == {"query": "a=b", "n": "2"}


def test_unknown_preset_key_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("iteratons: 3\n")
    with pytest.raises(ConfigError, match="did you mean 'iterations'"):
        load_preset(str(bad))


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_presets_only_override(path):
    """A preset says what it changes: a key set to its default would pin a copy of it."""
    defaults = flat(Config())
    restated = {k: v for k, v in load_preset(str(path)).items() if k != "env_kwargs" and defaults.get(k) == v}
    assert not restated, f"{path.name} restates defaults: {restated}"


def test_each_option_is_defined_once_and_round_trips():
    """One name per option across the sections; flat and from_flat invert each other; a flag reaches
    its section; a section name maps to a mapping of its options in YAML too."""
    names = [f.name for s in SECTIONS for f in dataclasses.fields(getattr(Config(), s))]
    assert len(names) == len(set(names)) and not set(names) & {f.name for f in dataclasses.fields(Config)}
    cfg = parse_config(["--lr", "2e-4", "--group-size", "4", "--reward", "format", "--lora-rank", "8"])
    assert (cfg.learner.lr, cfg.data.group_size, cfg.rewards.reward, cfg.scaling.lora_rank) == (2e-4, 4, "format", 8)
    assert from_flat(flat(cfg)) == cfg
    assert from_flat({"learner": {"lr": 3e-4}}).learner.lr == 3e-4
    with pytest.raises(ConfigError, match="unknown option 'lr' in section 'data'"):
        from_flat({"data": {"lr": 3e-4}})


def test_a_pretrained_model_with_the_toys_learning_rates_gets_a_note(tmp_path):
    """A hub id or a folder the project cannot know keeps the defaults, with a note naming them; a named
    model brings its preset instead (below), so it gets none."""
    from algos.config import DEFAULT_SFT_STEPS
    from algos.validate import toy_defaults_note

    note = toy_defaults_note(parse_config(["--model", "HuggingFaceTB/SmolLM2-135M-Instruct"]))
    assert note and "\n" not in note
    kept = f"lr 0.00015, sft_lr 0.001, sft_batch_size 64, sft_steps {DEFAULT_SFT_STEPS}"
    assert kept in note and "presets for real models are in configs/" in note
    tuned = toy_defaults_note(parse_config(["--model", "/some/model", "--lr", "2e-6", "--sft-steps", "0"]))
    assert "lr 2e-06" not in tuned and "sft_steps" not in tuned and "sft_lr 0.001" in tuned
    own = toy_defaults_note(parse_config(["--model", "Qwen/Qwen2.5-1.5B-Instruct"]))
    assert own.endswith("its preset is --config configs/qwen2.5-1.5b.yaml")  # a hub id with a shipped preset
    assert toy_defaults_note(parse_config(["--model", "smollm2-135m-instruct"])) is None  # its preset sets them all
    assert toy_defaults_note(parse_config([])) is None  # the tiny model: the defaults are its own
    assert toy_defaults_note(parse_config(["--model", "tiny-qwen2.5"])) is None  # random weights
    ckpt = tmp_path / "iter_3"
    ckpt.mkdir()
    (ckpt / "trainer_state.pt").write_bytes(b"")
    assert toy_defaults_note(parse_config(["--model", str(ckpt)])) is None  # trained here: its run chose them


# ---- named models and envs bring their presets (algos/presets.py) ---------------------------------
@pytest.mark.parametrize(("flags", "preset"), [
    (["--model", "smollm2-135m-instruct"], "smollm2-135m.yaml"),
    (["--model", "tiny-qwen2.5"], "tiny-qwen2.5.yaml"),
    (["--env", "TextWorld-CoinCollector-v0"], "textworld_coin.yaml"),
    (["--env", "Sokoban-v0"], "sokoban.yaml"),
    (["--env", "Arithmetic-v0"], "arithmetic.yaml"),
])  # fmt: skip
def test_a_named_model_or_env_resolves_to_its_preset(flags, preset):
    assert flat(parse_config(flags)) == flat(parse_config(["--config", str(ROOT / "configs" / preset)]))


def test_flags_and_a_config_file_win_over_the_named_presets(tmp_path):
    cfg = parse_config(["--model", "smollm2-135m-instruct", "--lr", "1e-5", "--env", "KeyDoor-v0"])
    assert (cfg.learner.lr, cfg.env, cfg.sft.sft_steps, cfg.sft.sft_lr) == (1e-5, "KeyDoor-v0", 30, 5e-5)
    mine = tmp_path / "mine.yaml"
    mine.write_text("sft_steps: 5\nenv_kwargs: {level: 3}\n")
    cfg = parse_config(["--config", str(mine), "--env", "TextWorld-CoinCollector-v0", "--env-kwargs", "num_games=8"])
    assert cfg.sft.sft_steps == 5 and cfg.log.eval_episodes == 32  # the file's value; the env preset's for the rest
    assert env_kwargs(cfg) == {"level": 3, "num_games": 8, "num_held_out": 32}  # key by key: preset < file < flag
    cfg = parse_config(["--env", "Sokoban-Medium-v0"])  # a family's preset keeps the id's own level
    assert (cfg.env, cfg.sft.sft_steps) == ("Sokoban-Medium-v0", 90)


def test_the_model_preset_wins_over_the_env_preset():
    """SmolLM2 on coin collector: the model's warm-up (30 steps of 8 at 5e-5, minutes) over the env's 90 steps
    of 64 at 1e-3 (hours, and too hot for pretrained weights); the env's own settings stay."""
    cfg = parse_config(["--model", "smollm2-135m-instruct", "--env", "TextWorld-CoinCollector-v0"])
    assert (cfg.env, cfg.sft.sft_steps, cfg.sft.sft_batch_size, cfg.sft.sft_lr) == ("TextWorld-CoinCollector-v0", 30, 8, 5e-5)
    assert env_kwargs(cfg) == {"level": 10, "num_games": 100, "num_held_out": 32}


def test_paths_hub_ids_and_the_default_bring_no_preset():
    defaults = flat(Config())
    for flags in ([], ["--model", "Qwen/Qwen2.5-1.5B-Instruct"], ["--model", "/some/model"], ["--env", "KeyDoor-Hard-v0"],
                  ["--env", "mypkg:Sokoban-v0"]):  # fmt: skip
        values = flat(parse_config(flags))
        assert {k: v for k, v in values.items() if v != defaults[k] and k not in ("model", "env")} == {}, flags


def test_the_preset_tables_point_at_presets_that_fit():
    """Each named preset exists; a model's preset trains that model; an env's preset names no model and is
    written for an env of the family it is mapped to."""
    from algos.presets import ENV_PRESETS, MODEL_PRESETS, named
    from envs import KEYDOOR_IDS, SINGLE_TURN_IDS, SOKOBAN_IDS, TEXTWORLD_IDS

    family = {env: i for i, ids in enumerate((KEYDOOR_IDS, SINGLE_TURN_IDS, SOKOBAN_IDS, TEXTWORLD_IDS)) for env in ids}

    for model, name in MODEL_PRESETS.items():
        preset = load_preset(str(ROOT / "configs" / name))
        assert preset.get("model", model) == model
    for env, name in ENV_PRESETS.items():
        preset = load_preset(str(ROOT / "configs" / name))
        assert "model" not in preset and family[env] == family[preset["env"]]
    assert [flag for flag, _ in named("smollm2-135m-instruct", "Sokoban-v0")] == ["--env Sokoban-v0",
                                                                                   "--model smollm2-135m-instruct"]  # fmt: skip


def test_a_resumed_run_keeps_its_own_config_over_the_presets(tmp_path):
    """--resume reads the run's config.yaml under the flags: every value is there, so a named preset changes nothing."""
    from algos.cli import resume_argv

    run = tmp_path / "run"
    run.mkdir()
    saved = flat(parse_config(["--model", "smollm2-135m-instruct", "--sft-steps", "12", "--lr", "3e-6"]))
    (run / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    argv, resume = resume_argv(["--resume", str(run)])
    assert flat(parse_config(argv, ("config.yaml", resume.saved))) == {**saved, "output_dir": str(run)}



def test_the_smollm2_preset_resolves_to_its_committed_runs_config():
    """docs/benchmarks.md quotes runs/smollm2-learn-m8: `--model smollm2-135m-instruct` must run what it ran. The run's
    config.yaml holds resolved values (algos/resolve.py); where the preset leaves an option to resolve, it must be
    unset there (autocast auto resolved to bf16 on that machine's AVX512-BF16), and every other option equal."""
    committed = yaml.safe_load((ROOT / "runs" / "smollm2-learn-m8" / "config.yaml").read_text())
    preset = flat(parse_config(["--model", "smollm2-135m-instruct"]))
    run_only = {"output_dir", "overwrite"}  # where that run wrote, not what it learned
    unset = {"autocast": "auto", "rollout_is": "auto", "min_update_samples": None, "micro_batch_tokens": None,
             "sync_tolerance": 0.0, "vllm_max_model_len": 0}  # fmt: skip  # each resolved for the run
    assert {k: preset[k] for k in unset} == unset
    differs = {k: (v, preset.get(k)) for k, v in committed.items()
               if k not in run_only | set(unset) and preset.get(k) != v}  # fmt: skip
    assert not differs and set(preset) == set(committed)
    assert (committed["autocast"], committed["rollout_is"], committed["micro_batch_size"]) == ("bf16", "token", 8)


def test_the_real_model_study_presets_resolve_to_their_committed_runs_configs():
    """studies/real-smollm2 holds the runs that docs/benchmarks.md's real-model tables rest on: each run's config
    must be what its preset's command parses to today, but for where it ran (output_dir, the warm-up's folder)
    and the values the trainer resolves on its machine (unset in the preset)."""
    import lzma

    from benchmarks.bench_learning import train_command
    from benchmarks.learning_presets import PRESETS

    with lzma.open(ROOT / "studies" / "real-smollm2" / "runs.json.xz", "rt") as f:
        runs = json.load(f)["runs"]
    assert runs
    resolved = {"autocast": "auto", "rollout_is": "auto", "min_update_samples": None, "micro_batch_tokens": None,
                "sync_tolerance": 0.0, "vllm_max_model_len": 0}  # fmt: skip
    for name, run in runs.items():
        key, seed, arm = name.split("/")
        cmd = train_command(PRESETS[key], Path("WARM"), int(seed[1:]), arm, Path("RUN"))
        preset = flat(parse_config(cmd[cmd.index("algos.train") + 1 :]))
        saved = run["config"]
        assert {k: preset[k] for k in resolved} == resolved
        differs = {k: (v, preset.get(k)) for k, v in saved.items()
                   if k not in {"output_dir", "model", *resolved} and preset.get(k) != v}  # fmt: skip
        assert not differs and set(preset) == set(saved), name
        warm = PRESETS[key].warm_from or key
        assert arm == "sft" or saved["model"].endswith(f"{warm}/{seed}/warm"), name
