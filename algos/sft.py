"""Cold start: supervised warm-up on expert demonstrations drawn from the env.

A randomly initialised (or generic) model almost never finishes a multi-step task, so
every group would have equal rewards and GRPO/GiGPO would have no signal. The warm-up
records prompts exactly as the agent builds them, labelled with the env's
`info["expert_action"]`, and trains on the reply that sends it in the run's action format
(`<action>...</action>`, a tool call or a JSON call: agents/tools.py) + EOS. While recording, a
random admissible command is taken with probability `noise` (the label stays the
expert's): the model then also sees how to recover from states the expert never visits.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from agents.agent import LLMAgent, View
from algos.collector import Collector
from algos.config import Config, ConfigError, env_kwargs
from algos.distributed import SINGLE
from algos.learner import Learner
from algos.logprobs import Sample, episode_sample
from envs.base import HELD_OUT_SEED, note_once
from envs.workers import WorkerConfig


def expert_demos(
    agent: LLMAgent, env_id: str, seeds: list[int], noise: float, rng: random.Random, env_kwargs: dict | None = None,
    workers: WorkerConfig | None = None,
):
    """(prompt ids, target ids) for every step of expert-labelled episodes; in the chat context one
    sample per episode, the conversation as the agent would have had it (the reply actually sent, a
    noisy step's too), trained on the expert's replies only (a noisy step's is context). The env runs
    behind the collector's guards: a step that fails or hangs ends that demonstration, not the warm-up."""
    guarded = Collector(env_id, 1, 1, env_kwargs, workers)
    demos: list[Sample] = []
    longest = 0
    for seed in seeds:
        obs, info = guarded.reset_env(0, seed)
        history: list[tuple[str, str]] = []
        turns: list[tuple[list[int], list[int], bool]] = []  # chat: (conversation so far, reply sent, expert's)
        while info.get("expert_action") is not None:
            label = info["expert_action"]
            adm = info.get("admissible_commands")
            view = View(info["task"], tuple(history), obs, tuple(adm) if adm is not None else None)
            target = reply_ids(agent, label, env_id)
            longest = max(longest, len(target))
            action = rng.choice(adm) if adm and rng.random() < noise else label
            if agent.chat is None:
                demos.append(Sample(agent.prompt_ids(view), target, 0.0, [0.0] * len(target)))
            else:
                prompt = agent.chat.follow(*turns[-1][:2], len(history) + 1, obs, adm) \
                    if turns else agent.prompt_ids(view)  # fmt: skip
                if turns and len(prompt) + agent.sampling.max_new_tokens > agent.max_context_tokens:
                    break  # where a rollout would end truncated
                turns.append((prompt, target if action == label else reply_ids(agent, action, env_id), action == label))
            history.append((obs, action))
            obs, _, term, trunc, info = guarded.step_env(0, action, obs, info)
            if term or trunc:
                break
        if turns and any(expert for *_, expert in turns):
            steps = [Demo(prompt, reply) for prompt, reply, _ in turns]
            demos.append(episode_sample(steps, [1.0] * len(steps), [expert for *_, expert in turns]))
    guarded.close()
    if not demos:
        raise ConfigError(f"{env_id} gives no info['expert_action']; pass --sft-steps 0 to train without warm-up")
    if longest > agent.sampling.max_new_tokens:  # tool calls take more tokens than an action tag
        note_once(f"the warm-up's replies take up to {longest} tokens but --max-new-tokens is "
                  f"{agent.sampling.max_new_tokens}: longer replies will be cut off (no complete action)")  # fmt: skip
    return demos


@dataclass(frozen=True)
class Demo:
    """One step of a demonstration conversation, as `episode_sample` reads a step."""

    prompt_ids: list[int]
    response_ids: list[int]
    traj_id: int = -1

    @property
    def rollout_logprobs(self) -> list[float]:
        return [0.0] * len(self.response_ids)


def reply_ids(agent: LLMAgent, command: str, env_id: str) -> list[int]:
    """The token ids of the reply that sends `command` in the agent's format, then EOS."""
    try:
        reply = agent.reply(command)
    except ValueError as e:  # an env tool set that cannot express its own expert's command
        raise ConfigError(f"{env_id}: SFT warm-up: {e}") from e
    tok = agent.tokenizer
    return tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]


def demos_from_config(cfg: Config, agent: LLMAgent) -> list[Sample]:
    """The warm-up's demonstrations as `cfg` sets them: cfg.sft.sft_episodes start states drawn from
    cfg.seed (never held-out ones), recorded with cfg.sft.sft_noise."""
    seeds = [int(s) for s in np.random.default_rng(cfg.seed).integers(0, HELD_OUT_SEED, cfg.sft.sft_episodes)]
    return expert_demos(agent, cfg.env, seeds, cfg.sft.sft_noise, random.Random(cfg.seed), env_kwargs(cfg),
                        cfg.workers)  # fmt: skip


def warm_up_from_config(cfg: Config, agent: LLMAgent, model, vocab: int, world=SINGLE,
                        after_step: Callable[[int], None] | None = None) -> tuple[list[Sample], list[float]]:
    """The trainer's warm-up as `cfg` sets it: its demonstrations (demos_from_config), then
    cfg.sft.sft_steps supervised steps (`after_step` as in `warm_up`). Returns (demos, losses). Under
    torchrun every rank records the same demonstrations and trains on its slice of each batch."""
    demos = demos_from_config(cfg, agent)
    sft = Learner.for_run(model, cfg, agent.tokenizer.pad_token_id, vocab, lr=cfg.sft.sft_lr, seed=cfg.seed, world=world)
    return demos, warm_up(sft, demos, cfg.sft.sft_steps, cfg.sft.sft_batch_size, cfg.seed, after_step)


def warm_up(learner: Learner, demos: list[Sample], steps: int, batch_size: int, seed: int,
            after_step: Callable[[int], None] | None = None) -> list[float]:
    """`steps` supervised steps on batches drawn from `demos`; `after_step(n)` runs after step n (1-based).
    The batches and the learning rate (constant after its linear warm-up) depend on the step alone, so the
    first n steps of a longer warm-up are exactly an n-step warm-up (benchmarks/bench_warmup.py)."""
    rng = random.Random(seed)
    losses = []
    bar = tqdm(range(steps), desc="warm-up (SFT)", leave=False, dynamic_ncols=True)
    episodes = demos[0].mask is not None  # chat: a batch is the episodes that hold batch_size replies
    for step in bar:
        batch = rng.sample(demos, min(batch_size, len(demos))) if not episodes else replies(demos, batch_size, rng)
        loss = learner.sft_step(batch)
        losses.append(loss)
        bar.set_postfix(loss=f"{loss:.3f}")
        if after_step is not None:
            after_step(step + 1)
    return losses


def replies(episodes: list[Sample], count: int, rng: random.Random) -> list[Sample]:
    """Episodes drawn without replacement until they hold `count` trained replies (or all are drawn):
    a chat-context warm-up step trains on as many replies as a window-context one."""
    order = rng.sample(episodes, len(episodes))
    batch, held = [], 0
    for episode in order:
        if held >= count:
            break
        batch.append(episode)
        held += episode.turns
    return batch


def has_expert(cfg) -> bool:
    """Whether the env gives expert actions to warm up on (one reset)."""
    env = gym.make(cfg.env, **env_kwargs(cfg))
    _, info = env.reset(seed=cfg.seed)
    env.close()
    if info.get("expert_action") is None:
        note_once(f"{cfg.env} gives no info['expert_action']: no SFT warm-up, RL starts from the model as it is")
        return False
    return True
