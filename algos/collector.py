"""Collector: G rollouts from the same start state, many groups at once, in lockstep.

`num_groups` x `group_size` envs (the rollout budget). The envs of one group reset with
one seed, so they start from the same state (GRPO's group), and their visits to equal
states are what GiGPO groups into anchor states. Groups may differ in size (the data
layer sizes them by pass rate) as long as they fit in the envs. All running envs step
together: one batched `act` per time step, and only envs still running are sent to the
model, so finished envs cost nothing.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import gymnasium as gym

import envs  # noqa: F401  (registers the built-in ids)
from agents.agent import LLMAgent, View
from agents.parser import OK
from agents.stopwatch import Stopwatch
from envs.base import note_once


class StepTimeout(Exception):
    """An env call did not return within the step timeout."""


@contextmanager
def deadline(seconds: float):
    """Raise StepTimeout in the main thread if the block runs longer than `seconds` (SIGALRM).
    A no-op at 0, off the main thread, or where the platform has no interval timer."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise StepTimeout(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
    """Steps many envs in lockstep. Every env call is guarded: an exception, or no answer within
    `step_timeout` seconds, ends that episode as truncated with `env_error` set (counted in
    rollout/env_errors), and the env is closed and made afresh; the other envs go on."""

    def __init__(self, env_id: str, num_groups: int, group_size: int, env_kwargs=None, step_timeout: float = 0.0,
                 isolate: bool = False) -> None:  # fmt: skip
        self.env_id, self.num_groups, self.group_size = env_id, num_groups, group_size
        self.env_kwargs, self.step_timeout, self.isolate = dict(env_kwargs or {}), step_timeout, isolate
        self.envs = [self._make() for _ in range(num_groups * group_size)]

    def _make(self) -> gym.Env:
        """In this process, or (isolate) in a child process that a hang or a crash cannot take down."""
        if self.isolate:
            from envs.isolated import IsolatedEnv

            return IsolatedEnv(self.env_id, self.env_kwargs, self.step_timeout)
        return gym.make(self.env_id, **self.env_kwargs)

    @property
    def _timer(self) -> float:
        return 0.0 if self.isolate else self.step_timeout  # an isolated env keeps its own time

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _remake(self, i: int) -> None:
        with suppress(Exception):  # a broken env may fail to close too; it is dropped either way
            self.envs[i].close()
        self.envs[i] = self._make()

    def reset_env(self, i: int, seed: int):
        """reset, with one retry on a fresh env; an env that cannot even reset stops the run."""
        for attempt in (1, 2):
            try:
                with deadline(self._timer):
                    return self.envs[i].reset(seed=seed)
            except Exception as e:
                if attempt == 2:
                    raise RuntimeError(f"{self.env_id}: reset(seed={seed}) failed twice: {type(e).__name__}: {e}") from e
                note_once(f"{self.env_id}: reset failed ({type(e).__name__}: {e}); the env was made afresh")
                self._remake(i)

    def step_env(self, i: int, action: str, obs: str, info: dict):
        """env.step, contained: a failure is a truncated step with info["error"]; the env is remade."""
        try:
            with deadline(self._timer):
                return self.envs[i].step(action)
        except Exception as e:
            error = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
            note_once(f"{self.env_id}: env errors are contained (first: {error}); see rollout/env_errors")
            self._remake(i)
            return obs, 0.0, False, True, {**info, "error": error, "won": False, "action_valid": False}

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
        if len(sizes) != len(seeds) or sum(sizes) > len(self.envs) or min(sizes, default=1) < 1:
            raise ValueError(f"{len(seeds)} seeds with group sizes {sizes} do not fit in {len(self.envs)} envs")
        group = [g for g, size in enumerate(sizes) for _ in range(size)]
        n = len(group)
        if n == 0:
            return []
        # env time goes beside the agent's prompt / generate / parse time (scripted agents have no clock)
        clock = getattr(agent, "stopwatch", None) or Stopwatch()
        with clock.section("env"):
            obs, infos = zip(*(self.reset_env(i, seeds[group[i]]) for i in range(n)))
        obs, infos = list(obs), list(infos)
        if "state_key" not in infos[0]:
            note_once(f"{self.env_id} gives no info['state_key']: GiGPO anchor states fall back to the observation text")
        history: list[list[tuple[str, str]]] = [[] for _ in range(n)]
        rows: list[list[dict]] = [[] for _ in range(n)]
        active = list(range(n))
        while active:
            views = [self._view(infos[i], history[i], obs[i]) for i in active]
            acts = agent.act(views)
            still = []
            for i, act in zip(active, acts):
                sent = act.command or act.text.strip()
                with clock.section("env"):
                    nxt, reward, term, trunc, info = self.step_env(i, sent, obs[i], infos[i])
                rows[i].append(
                    dict(
                        state_key=str(infos[i].get("state_key", obs[i])),
                        observation=obs[i],
                        prompt_ids=act.prompt_ids,
                        response_ids=act.response_ids,
                        rollout_logprobs=act.logprobs,
                        response=act.text,
                        action=sent,
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
                history[i].append((obs[i], sent))
                obs[i], infos[i] = nxt, info
                if not (term or trunc):
                    still.append(i)
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
    def _view(info: dict, history: list[tuple[str, str]], obs: str) -> View:
        admissible = info.get("admissible_commands")
        return View(
            task=str(info.get("task", "")),
            history=tuple(history),
            observation=obs,
            admissible=tuple(admissible) if admissible is not None else None,
            expert=info.get("expert_action"),
        )
