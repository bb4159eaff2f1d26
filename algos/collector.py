"""Collector: G rollouts from the same start state, many groups at once, in lockstep.

`num_groups` x `group_size` envs (the rollout budget). The envs of one group reset with
one seed, so they start from the same state (GRPO's group), and their visits to equal
states are what GiGPO groups into anchor states. Groups may differ in size (the data
layer sizes them by pass rate) as long as they fit in the envs. All running envs step
together: one batched `act` per time step, and only envs still running are sent to the
model, so finished envs cost nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import envs  # noqa: F401  (registers the built-in ids)
from agents.agent import LLMAgent, View
from agents.parser import OK
from agents.stopwatch import Stopwatch
from envs.base import note_once
from envs.workers import WorkerConfig, make_pool


@dataclass(frozen=True)
class Step:
    group_id: int
    traj_id: int
    t: int
    state_key: str
    observation: str
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float]
    response: str
    action: str
    parse_status: str
    action_valid: bool  # parsed ok and accepted by the env
    reward: float
    terminated: bool
    truncated: bool
    won: bool  # the episode's outcome, the same on every step of a trajectory
    env_error: bool = False  # the env failed on this step (info["error"]); the episode ended truncated
    answer: str | None = None  # the reference answer of the problem (info["answer"]), for verifiers
    task_type: str = ""  # info["task_type"]: which rubric scores this answer
    context_truncated: bool = False  # chat context: the conversation reached --max-context-tokens here (truncated)


@dataclass(frozen=True)
class Trajectory:
    group_id: int
    traj_id: int
    seed: int
    task: str
    steps: list[Step]

    @property
    def won(self) -> bool:
        return bool(self.steps) and self.steps[-1].won

    @property
    def episode_return(self) -> float:
        return sum(s.reward for s in self.steps)


class Collector:
    """Steps many envs in lockstep, in this process or spread over env workers (envs/workers.py).
    Every env call is guarded: an exception, or no answer within the step timeout, ends that episode
    as truncated with `env_error` set (counted in rollout/env_errors), and the env is made afresh;
    the other envs go on."""

    def __init__(self, env_id: str, num_groups: int, group_size: int, env_kwargs=None,
                 workers: WorkerConfig | None = None) -> None:  # fmt: skip
        self.env_id, self.num_groups, self.group_size = env_id, num_groups, group_size
        self.pool = make_pool(env_id, num_groups * group_size, env_kwargs, workers)
        self.num_envs = self.pool.n

    def close(self) -> None:
        self.pool.close()

    def reset_envs(self, ids: list[int], seeds: list[int]) -> list[tuple[str, dict]]:
        """Env ids[k] reset with seeds[k], in one round; a failed reset is retried once on a fresh env, and
        an env that cannot even reset stops the run."""
        out = self.pool.run([(i, "reset", {"seed": seed}) for i, seed in zip(ids, seeds)])
        failed = [k for k, (status, _) in enumerate(out) if status != "ok"]
        if failed:
            note_once(f"{self.env_id}: reset failed ({out[failed[0]][1]}); the env was made afresh")
            for k, again in zip(failed, self.pool.run([(ids[k], "reset", {"seed": seeds[k]}) for k in failed])):
                if again[0] != "ok":
                    raise RuntimeError(f"{self.env_id}: reset(seed={seeds[k]}) failed twice: {again[1]}")
                out[k] = again
        return [value for _, value in out]

    def step_envs(self, ids: list[int], actions: list[str], obs: list[str], infos: list[dict]) -> list[tuple]:
        """env.step for each env of `ids` in one round, contained: a failure is a truncated step that keeps
        the observation, with info["error"]; that env is made afresh on its next call."""
        out = []
        for (status, value), o, info in zip(self.pool.run(list(zip(ids, ["step"] * len(ids), actions))), obs, infos):
            if status == "ok":
                out.append(value)
                continue
            error = str(value).replace("\n", " ")[:300]
            note_once(f"{self.env_id}: env errors are contained (first: {error}); see rollout/env_errors")
            out.append((o, 0.0, False, True, {**info, "error": error, "won": False, "action_valid": False}))
        return out

    def reset_env(self, i: int, seed: int) -> tuple[str, dict]:
        """One env's reset (the warm-up's expert episodes); see reset_envs."""
        return self.reset_envs([i], [seed])[0]

    def step_env(self, i: int, action: str, obs: str, info: dict) -> tuple:
        """One env's step; see step_envs."""
        return self.step_envs([i], [action], [obs], [info])[0]

    def collect(
        self,
        agent: LLMAgent,
        seeds: list[int],
        first_traj_id: int = 0,
        group_sizes: list[int] | None = None,
        first_group_id: int = 0,
        on_done: Callable[[int], object] | None = None,
    ) -> list[Trajectory]:
        """One rollout per env; `seeds[g]` is the start state of group g, which has
        `group_sizes[g]` rollouts (default `group_size`) and id `first_group_id + g`.
        `on_done(n)` is told whenever n more episodes finished (progress bars)."""
        sizes = group_sizes if group_sizes is not None else [self.group_size] * len(seeds)
        if len(sizes) != len(seeds) or sum(sizes) > self.num_envs or min(sizes, default=1) < 1:
            raise ValueError(f"{len(seeds)} seeds with group sizes {sizes} do not fit in {self.num_envs} envs")
        group = [g for g, size in enumerate(sizes) for _ in range(size)]
        n = len(group)
        if n == 0:
            return []
        # env time goes beside the agent's prompt / generate / parse time (scripted agents have no clock)
        clock = getattr(agent, "stopwatch", None) or Stopwatch()
        with clock.section("env"):
            obs, infos = zip(*self.reset_envs(list(range(n)), [seeds[group[i]] for i in range(n)]))
        obs, infos = list(obs), list(infos)
        if "state_key" not in infos[0]:
            note_once(f"{self.env_id} gives no info['state_key']: GiGPO anchor states fall back to the observation text")
        history: list[list[tuple[str, str]]] = [[] for _ in range(n)]
        rows: list[list[dict]] = [[] for _ in range(n)]
        active = list(range(n))
        chat = getattr(agent, "chat", None)  # the chat context: each env's conversation so far is its prompt
        conversation: list[list[int]] = [[] for _ in range(n)]
        while active:
            views = [self._view(infos[i], history[i], obs[i]) for i in active]
            if chat is None:
                acts = agent.act(views)
            else:
                with clock.section("prompt"):
                    for i, view in zip(active, views):
                        conversation[i] = conversation[i] or agent.prompt_ids(view)
                acts = agent.act(views, prompts=[conversation[i] for i in active])
            sent = [act.command or act.text.strip() for act in acts]
            with clock.section("env"):  # one round: every running env steps (in parallel with env workers)
                results = self.step_envs(active, sent, [obs[i] for i in active], [infos[i] for i in active])
            still = []
            for i, act, action, (nxt, reward, term, trunc, info) in zip(active, acts, sent, results):
                rows[i].append(
                    dict(
                        state_key=str(infos[i].get("state_key", obs[i])),
                        observation=obs[i],
                        prompt_ids=act.prompt_ids,
                        response_ids=act.response_ids,
                        rollout_logprobs=act.logprobs,
                        response=act.text,
                        action=action,
                        parse_status=act.status,
                        action_valid=act.status == OK and bool(info.get("action_valid", True)),
                        reward=float(reward),
                        terminated=bool(term),
                        truncated=bool(trunc),
                        env_error=bool(info.get("error")),
                        answer=None if infos[i].get("answer") is None else str(infos[i]["answer"]),
                        task_type=str(infos[i].get("task_type", "")),
                    )
                )
                history[i].append((obs[i], action))
                obs[i], infos[i] = nxt, info
                if not (term or trunc):
                    still.append(i)
            if chat is not None:
                still = self._extend(agent, still, conversation, dict(zip(active, acts)), obs, infos, rows, clock)
            if on_done is not None and len(still) < len(active):
                on_done(len(active) - len(still))
            active = still
        trajectories = []
        for i in range(n):
            won = bool(infos[i].get("won", False))
            gid = first_group_id + group[i]
            steps = [
                Step(group_id=gid, traj_id=first_traj_id + i, t=t, won=won, **row) for t, row in enumerate(rows[i])
            ]
            task = str(infos[i].get("task", ""))
            trajectories.append(Trajectory(gid, first_traj_id + i, seeds[group[i]], task, steps))
        return trajectories

    @staticmethod
    def _extend(agent, running, conversation, acts, obs, infos, rows, clock) -> list[int]:
        """Chat context: each running env's conversation grows by its reply and its next observation
        (agents/chat.py); one that would then leave no room for a reply within --max-context-tokens ends
        here, truncated, with its last step marked. Returns the envs that go on."""
        still, room = [], agent.max_context_tokens - agent.sampling.max_new_tokens
        with clock.section("prompt"):
            for i in running:
                conversation[i] = agent.chat.follow(acts[i].prompt_ids, acts[i].response_ids, len(rows[i]) + 1,
                                                    obs[i], infos[i].get("admissible_commands"))  # fmt: skip
                if len(conversation[i]) > room:
                    rows[i][-1].update(truncated=True, context_truncated=True)
                else:
                    still.append(i)
        return still

    @staticmethod
    def _view(info: dict, history: list[tuple[str, str]], obs: str) -> View:
        admissible = info.get("admissible_commands")
        return View(
            task=str(info.get("task", "")),
            history=tuple(history),
            observation=obs,
            admissible=tuple(admissible) if admissible is not None else None,
            expert=info.get("expert_action"),
        )
