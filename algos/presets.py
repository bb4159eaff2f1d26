"""Named presets: the configs/ file that a built-in model or a built-in env family brings with it.

    python -m algos.train --model smollm2-135m-instruct      # = --config configs/smollm2-135m.yaml
    python -m algos.train --env TextWorld-CoinCollector-v0   # = --config configs/textworld_coin.yaml

The trainer's defaults were chosen for the tiny random model on KeyDoor. A model or env that the
project names and has measured settings for starts from those settings instead, wherever the user
did not set a value. The layers, lowest first:

    defaults < env preset < model preset < --config FILE < flags

- The model's preset wins over the env's where both set a value: a model's values bound what a run
  costs and what the weights survive (SmolLM2's warm-up is 30 steps of 8 at lr 5e-5; the env presets'
  90 steps of 64 at lr 1e-3 would take hours and wreck the pretrained weights), while the env presets'
  values were measured with the tiny model.
- A `--config` file and flags win over both: they are what the user asked for.
- The env a model preset names (SmolLM2: KeyDoor-Easy-v0) is the run's env unless `--env` or the
  `--config` file names another; the env preset is then the one of the env the run ends up with.
- A path, a hub id or `tiny` brings nothing: the project cannot know a model it did not build
  (algos/validate.py `toy_defaults_note` says which defaults were kept). Neither does `--resume`: the
  run's config.yaml holds every value.

Left without a preset on purpose: `random-qwen2.5-1.5b` (random weights in Qwen2.5-1.5B's shape, for
the machinery measurements of scripts.gpu_check, which sets what it measures), the KeyDoor envs (the
defaults were chosen on KeyDoor-v0; configs/keydoor_hard.yaml is a longer job to ask for with --config)
and the TextWorld families other than coin collector (nothing was measured on them).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from envs import SINGLE_TURN_IDS, SOKOBAN_IDS

CONFIGS = Path(__file__).resolve().parent.parent / "configs"

MODEL_PRESETS = {
    "smollm2-135m-instruct": "smollm2-135m.yaml",
    "tiny-qwen2.5": "tiny-qwen2.5.yaml",
}
ENV_PRESETS = {
    "TextWorld-CoinCollector-v0": "textworld_coin.yaml",
    **{env: "sokoban.yaml" for env in SOKOBAN_IDS},  # the level is the id's; the warm-up length the family's
    **{env: "arithmetic.yaml" for env in SINGLE_TURN_IDS},  # one step per episode, exact answers: GRPO, numeric
}


def model_preset(model: str) -> Path | None:
    """The preset a built-in model's name brings, or None."""
    return CONFIGS / MODEL_PRESETS[model] if model in MODEL_PRESETS else None


def env_preset(env: str) -> Path | None:
    """The preset a built-in env id brings, or None (an id with a module prefix is the user's own)."""
    return CONFIGS / ENV_PRESETS[env] if env in ENV_PRESETS else None


def named(model: str, env: str) -> list[tuple[str, Path]]:
    """The presets that `--model model --env env` bring, lowest layer first, as (flag, path)."""
    out = []
    if path := env_preset(env):
        out.append((f"--env {env}", path))
    if path := model_preset(model):
        out.append((f"--model {model}", path))
    return out


def written_for(model: str) -> Path | None:
    """A configs/ preset whose `model:` is this hub id or path (e.g. configs/qwen2.5-1.5b.yaml for
    Qwen/Qwen2.5-1.5B-Instruct), which `--config` brings; None. Named, not applied: those presets
    also choose the device and the engine."""
    for path in sorted(CONFIGS.glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        if isinstance(data, dict) and data.get("model") == model and model not in MODEL_PRESETS:
            return path
    return None
