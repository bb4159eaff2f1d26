"""LLMAgent: observations in, parsed commands plus the exact tokens behind them out.

One `act` call serves a whole batch of envs: it builds each env's prompt (memory window,
chat template), sends all prompts to the backend in one `generate`, decodes and parses
the responses in the run's action format (agents/tools.py). The result keeps prompt ids, response ids and per-token logprobs, which
become the training sample of that step.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.backend import Backend
from agents.chat import ChatFormat
from agents.generation import Sampling
from agents.prompt import PromptBuilder
from agents.stopwatch import Stopwatch
from agents.templates import renders_tools


@dataclass(frozen=True)
class View:
    """What the agent sees of one env at one step."""

    task: str
    history: tuple[tuple[str, str], ...]  # (observation, action) pairs, oldest first
    observation: str
    admissible: tuple[str, ...] | None
    expert: str | None = None  # the env's expert_action: never shown to the model; scripted baselines use it


@dataclass(frozen=True)
class Act:
    command: str
    status: str
    text: str
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]


class LLMAgent:
    def __init__(
        self,
        tokenizer,
        backend: Backend,
        prompts: PromptBuilder,
        sampling: Sampling,
        max_prompt_tokens: int = 1024,
        context: str = "window",
        max_context_tokens: int = 4096,
    ) -> None:
        """`context`: window (each prompt built from a View) or chat (the collector keeps each episode's
        conversation with `self.chat`, agents/chat.py, and passes it as the prompt)."""
        self.tokenizer = tokenizer
        self.backend = backend
        self.prompts = prompts
        self.sampling = sampling
        self.max_prompt_tokens = max_prompt_tokens
        self.stopwatch = Stopwatch()  # prompt / generate / parse seconds (the collector adds env)
        self.format = prompts.action_format
        # tool_call: the chat template renders the tools itself when it can (json asks for no tags)
        self.native_tools = self.format.name == "tool_call" and renders_tools(tokenizer)
        self.context, self.max_context_tokens = context, max_context_tokens
        self.chat: ChatFormat | None = None
        if context == "chat":  # ValueError (one line) for a template that rewrites earlier turns
            role = "tool" if self.format.name == "tool_call" else "user"
            tools = self.format.tools_for(None) if self.native_tools else None
            self.chat = ChatFormat(tokenizer, prompts, role, tools)

    def prompt_ids(self, view: View) -> list[int]:
        """Chat-templated prompt; drops the oldest memory first if it grows too long. In the chat context,
        the first prompt of an episode (the collector extends it with `self.chat.follow`)."""
        if self.chat is not None:
            return self.chat.first(view.task, view.observation, view.admissible)
        history = list(view.history)
        while True:
            msgs = self.prompts.messages(view.task, history, view.observation, view.admissible, self.native_tools)
            tools = {"tools": self.format.tools_for(view.admissible)} if self.native_tools else {}
            text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **tools)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(ids) <= self.max_prompt_tokens or not history:
                return ids[-self.max_prompt_tokens :]
            history = history[1:]

    def reply(self, command: str) -> str:
        """The reply text that sends `command` in this agent's format (the SFT warm-up's target)."""
        return self.format.reply(command)

    def act(self, views: list[View], sampling: Sampling | None = None,
            prompts: list[list[int]] | None = None) -> list[Act]:  # fmt: skip
        """One reply per view; `prompts`: the views' prompt ids when the caller built them (a conversation)."""
        if not views:
            return []
        with self.stopwatch.section("prompt"):
            if prompts is None:
                built: dict[View, list[int]] = {}  # a group's envs often show the same view (its first step)
                for v in views:
                    if v not in built:
                        built[v] = self.prompt_ids(v)
                prompts = [built[v] for v in views]
        with self.stopwatch.section("generate"):
            responses, logprobs = self.backend.generate(prompts, sampling or self.sampling)
        acts = []
        with self.stopwatch.section("parse"):
            for view, p, r, lp in zip(views, prompts, responses, logprobs):
                text = self.tokenizer.decode(r, skip_special_tokens=True)
                command, status = self.format.parse(text, view.admissible)
                acts.append(Act(command, status, text, p, r, lp))
        return acts
