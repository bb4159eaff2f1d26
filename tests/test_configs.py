from pathlib import Path

import pytest

from algos.config import Config, ConfigError, load_preset, validate

PRESETS = sorted(Path(__file__).resolve().parent.parent.joinpath("configs").glob("*.yaml"))


def test_there_are_presets():
    assert PRESETS


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_every_preset_loads_and_validates(path):
    cfg = Config(**load_preset(str(path)))
    if cfg.model in ("tiny",) or cfg.model.count("/") != 1:
        validate(cfg)
    else:  # hub models are checked by name only; nothing is downloaded in tests
        validate(Config(**{**load_preset(str(path)), "model": "tiny", "device": "cpu"}))


def test_unknown_preset_key_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("iteratons: 3\n")
    with pytest.raises(ConfigError, match="did you mean 'iterations'"):
        load_preset(str(bad))
