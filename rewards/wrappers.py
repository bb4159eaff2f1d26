"""ScoredReward: the reward layer as a Gymnasium wrapper, for envs used outside the trainer.

    import gymnasium as gym
    import envs
    from rewards.wrappers import ScoredReward

    env = ScoredReward(gym.make("Arithmetic-v0", level=3), "numeric=1,format=0.1")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("<think>6 * 7</think><action>42</action>")
    info["reward_parts"]   # {"numeric": 1.0, "format": 1.0}; info["env_reward"] is the env's own

`step` takes the model's whole response: the inner env gets the command parsed from its
`<action>` tag (the text as it is when there is none), the scorers see the whole text.
Step sources score every step, answer sources the step that ends the episode. The trainer
applies the same sources to whole batches (algos/scoring.py), which lets a judge score many
responses in one pass; this wrapper scores one response at a time.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agents.parser import parse_action
from rewards.base import STEP, RewardItem, Scorer, score_batch
from rewards.layer import RewardConfig, build_scorer, parse_spec


class ScoredReward(gym.Wrapper):
    def __init__(self, env: gym.Env, sources: str | list[tuple[Scorer, float]], options: RewardConfig | None = None):
        super().__init__(env)
        if isinstance(sources, str):
            rubric = (env.unwrapped.metadata or {}).get("rubric")
            sources = [(build_scorer(n, options or RewardConfig(), rubric), w) for n, w in parse_spec(sources)]
        self.sources = sources
        self._obs, self._info = "", {}

    def reset(self, **kwargs) -> tuple[str, dict[str, Any]]:
        self._obs, self._info = self.env.reset(**kwargs)
        return self._obs, self._info

    def step(self, action: str):
        command, _ = parse_action(action)
        obs, env_reward, terminated, truncated, info = self.env.step(command or action)
        item = RewardItem(question=self._obs, response=action, action=command, answer=self._info.get("answer"),
                          task_type=str(self._info.get("task_type", "")), task=str(self._info.get("task", "")),
                          env_reward=float(env_reward))  # fmt: skip
        parts: dict[str, float | None] = {}
        for scorer, _ in self.sources:
            if scorer.scope == STEP or terminated or truncated:
                parts[scorer.name] = score_batch(scorer, [item])[0]  # None: the scorer failed on it
        reward = sum(w * (parts.get(s.name) or 0.0) for s, w in self.sources)
        self._obs, self._info = obs, info
        info = {**info, "env_reward": float(env_reward), "reward_parts": parts}
        return obs, float(reward), terminated, truncated, info
