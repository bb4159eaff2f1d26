from pathlib import Path

import pytest

from agents.vllm_backend import vllm_available
from algos.config import ConfigError, env_kwargs, load_preset, parse_config, validate

PRESETS = sorted(Path(__file__).resolve().parent.parent.joinpath("configs").glob("*.yaml"))


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
        cfg.model, cfg.device = "tiny", "cpu"  # hub models are checked by name only; nothing is downloaded
        cfg.vllm_sleep = False  # GPU-only, like the preset's device; the rest is checked on the CPU
    if cfg.backend == "vllm" and not vllm_available():
        cfg.backend = "hf"  # an install without vLLM still checks the rest of the preset
    validate(cfg)


def test_env_kwargs_from_yaml_and_flags_are_read_as_yaml(tmp_path):
    preset = tmp_path / "tw.yaml"
    preset.write_text("env: KeyDoor-v0\nenv_kwargs: {width: 4, compass: false, walls: 0.5}\n")
    cfg = parse_config(["--config", str(preset), "--env-kwargs", "width", "5", "height", "2"])
    assert env_kwargs(cfg) == {"width": 5, "compass": False, "walls": 0.5, "height": 2}  # key by key
    cfg = parse_config(["--config", str(preset)])
    assert env_kwargs(cfg) == {"width": 4, "compass": False, "walls": 0.5}
    with pytest.raises(ConfigError, match="KEY VALUE pairs"):
        parse_config(["--env-kwargs", "width", "--iterations", "2"])


def test_unknown_preset_key_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("iteratons: 3\n")
    with pytest.raises(ConfigError, match="did you mean 'iterations'"):
        load_preset(str(bad))
