"""The reward layer: named reward sources, composed with weights, applied to whole episodes.

    --reward env                       the env's own reward (the default)
    --reward numeric                   a verifier: the answer is the reference number
    --reward numeric=1,format=0.1      weighted sum: verifier plus a format reward
    --reward rubric                    the env's rubric file (or --rubric FILE)
    --reward numeric=1,judge=0         train on the verifier; score with a judge too, weight 0:
                                       it is logged and audited, never trained on
    --reward mypkg.rewards:brevity=0.5 any function RewardItem -> float, or a Scorer object

Built-in sources: env, exact, numeric, regex (`--reward-regex`, `{answer}` = the reference),
format, rubric, judge (`--judge-model`). "step" sources (env, format) score every env step;
"outcome" sources score the last step of an episode (the answer) against `info["answer"]`.
A step's reward is the weighted sum of the sources that score it. A source that fails on
a response scores it as an error: counted in `reward/<name>/errors`, worth 0, never a crash;
its first error is noted on stderr, and a trained-on source that fails on every response for
`--max-failed-reward-iterations` iterations in a row stops the run (algos/run.py).
"""

from __future__ import annotations

import difflib
import importlib
import traceback
from dataclasses import dataclass

import numpy as np

from envs.base import at_least, choose, note_once
from rewards import verifiers
from rewards.base import JUDGE_MODES, OUTCOME, STEP, FunctionScorer, RewardItem, Scorer, score_batch

BUILTIN = ("env", "exact", "numeric", "regex", "format", "rubric", "judge")
NEEDS_ANSWER = ("exact", "numeric")  # sources that are meaningless without info["answer"]


@dataclass(frozen=True)
class RewardConfig:
    """-- rewards (rewards/, docs/rewards.md) --"""

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
    max_failed_reward_iterations: int = 3
    """Stop (exit 1, weights saved) after this many iterations in a row in which a --reward source with a
    nonzero weight failed on every response it scored (raised, or returned NaN, inf or a non-number):
    the run would go on without that reward. 0 = never."""

    def check(self) -> None:
        """The section's own values, the --reward spec parsed. Raises ValueError (one line)."""
        parse_spec(self.reward)
        choose("judge_mode", self.judge_mode, JUDGE_MODES)
        if not (self.judge_batch_size >= 1 and self.audit_honeypots >= 2 and self.audit_every >= 0
                and self.reward_tolerance >= 0):  # fmt: skip
            raise ValueError("need judge_batch_size >= 1, audit_honeypots >= 2, audit_every >= 0, reward_tolerance >= 0")
        if not 0.0 < self.probe_threshold <= 1.0:
            raise ValueError(f"probe_threshold must be in (0, 1] (got {self.probe_threshold})")
        at_least("max_failed_reward_iterations", self.max_failed_reward_iterations, 0)


def parse_spec(spec: str) -> list[tuple[str, float]]:
    """ "numeric=1,format=0.1" -> [("numeric", 1.0), ("format", 0.1)]. Raises ValueError."""
    out: list[tuple[str, float]] = []
    for part in (p.strip() for p in str(spec).split(",")):
        if not part:
            raise ValueError(f"--reward {spec!r}: empty source; write name[=weight],... e.g. numeric=1,format=0.1")
        name, _, weight = part.partition("=")
        name = name.strip()
        try:
            value = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"--reward: the weight of {name!r} must be a number (got {weight!r})") from None
        if not np.isfinite(value):
            raise ValueError(f"--reward: the weight of {name!r} must be finite (got {weight!r})")
        if name not in BUILTIN and ":" not in name:
            close = difflib.get_close_matches(name, BUILTIN, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(
                f"--reward: unknown source {name!r}; {hint}choose from {', '.join(BUILTIN)} or module:function"
            )
        if name in (n for n, _ in out):
            raise ValueError(f"--reward: source {name!r} appears twice")
        out.append((name, value))
    if all(w == 0 for _, w in out):
        raise ValueError(f"--reward {spec!r}: every weight is 0, nothing would be trained on")
    return out


def build_scorer(name: str, opts: RewardConfig, env_rubric: str | None = None, device: str = "cpu") -> Scorer:
    """One named source as a Scorer (a judge loads on `device`). Raises ValueError for a source that cannot be built."""
    if name == "env":
        return FunctionScorer("env", lambda it: it.env_reward, STEP, needs_answer=False)
    if name == "format":
        return FunctionScorer("format", lambda it: verifiers.well_formed(it.response), STEP, needs_answer=False)
    if name == "exact":
        return FunctionScorer("exact", lambda it: verifiers.exact(it.action, it.answer))
    if name == "numeric":
        return FunctionScorer("numeric", lambda it: verifiers.numeric(it.action, it.answer, opts.reward_tolerance))
    if name == "regex":
        if not opts.reward_regex:
            raise ValueError("--reward regex needs --reward-regex PATTERN ({answer} stands for the reference)")
        verifiers.answer_pattern(opts.reward_regex, "0")  # compiles, or raises re.error
        uses_answer = "{answer}" in opts.reward_regex
        return FunctionScorer("regex", lambda it: verifiers.regex(it.response, opts.reward_regex, it.answer),
                              needs_answer=uses_answer)  # fmt: skip
    if name == "rubric":
        from rewards.rubric import RubricScorer, load_rubrics

        path = opts.rubric or env_rubric
        if not path:
            raise ValueError("--reward rubric needs --rubric FILE (this env ships no rubric)")
        return RubricScorer(load_rubrics(path))
    if name == "judge":
        from rewards.judge import JudgeScorer

        return JudgeScorer.from_pretrained(opts.judge_model, device, **judge_options(opts, env_rubric))
    return _custom(name)


def judge_options(opts: RewardConfig, env_rubric: str | None = None) -> dict:
    """The judge's keyword arguments, every file read and checked, without loading the model:
    what `--reward judge` needs, validated before anything heavy loads. Raises ValueError."""
    from agents.model import model_missing
    from rewards.judge import load_prompt

    if not opts.judge_model:
        raise ValueError("--reward judge needs --judge-model (a local folder, a hub id, or tiny)")
    if model_missing(opts.judge_model):
        raise ValueError(f"judge model path {opts.judge_model!r} does not exist")
    rubrics = None
    if opts.rubric or env_rubric:  # the judge is shown the rubric's criteria
        from rewards.rubric import load_rubrics

        rubrics = load_rubrics(opts.rubric or env_rubric)
    kw = dict(mode=opts.judge_mode, batch_size=opts.judge_batch_size, rubrics=rubrics)
    if opts.judge_prompt:
        kw["prompt"] = load_prompt(opts.judge_prompt)
    return kw


def _custom(name: str) -> Scorer:
    module, _, attr = name.rpartition(":")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--reward {name}: cannot load {attr!r} from {module!r}: {e}") from None
    except Exception as e:  # the user's module failed while importing (a SyntaxError too): name it, and where
        frames = traceback.extract_tb(e.__traceback__)
        where = "" if isinstance(e, SyntaxError) or not frames else f" ({frames[-1].filename}, line {frames[-1].lineno})"
        raise ValueError(f"--reward {name}: importing {module!r} raised {type(e).__name__}: {e}{where}") from None
    if isinstance(obj, type):
        obj = obj()
    if hasattr(obj, "score"):
        obj.name = getattr(obj, "name", attr)
        obj.scope = getattr(obj, "scope", OUTCOME)
        return obj
    if callable(obj):
        return FunctionScorer(attr, obj, OUTCOME, needs_answer=False)
    raise ValueError(f"--reward {name}: {attr!r} is neither a function of a RewardItem nor a scorer")


class RewardLayer:
    """Weighted reward sources; scores episodes (lists of RewardItem, one per step)."""

    def __init__(self, sources: list[tuple[Scorer, float]], pass_threshold: float = 0.5) -> None:
        self.sources, self.pass_threshold = sources, pass_threshold
        self.first_error: dict[str, str] = {}  # each source's first error, noted once on stderr
        self._reset()

    @property
    def scorers(self) -> list[Scorer]:
        return [s for s, _ in self.sources]

    def _reset(self) -> None:
        self._scores: dict[str, list[float]] = {s.name: [] for s, _ in self.sources}
        self._errors: dict[str, int] = {s.name: 0 for s, _ in self.sources}
        self._returns: list[float] = []
        self._lengths: list[float] = []

    def score_episodes(self, episodes: list[list[RewardItem]]) -> list[list[float]]:
        """One composed reward per step of every episode; statistics accumulate for `metrics`."""
        rewards = [[0.0] * len(ep) for ep in episodes]
        for scorer, weight in self.sources:
            where = [(e, t) for e, ep in enumerate(episodes) for t in range(len(ep))
                     if scorer.scope == STEP or t == len(ep) - 1]  # fmt: skip
            errors: list[str] = []
            scores = score_batch(scorer, [episodes[e][t] for e, t in where], errors)
            if errors and scorer.name not in self.first_error:
                first = self.first_error[scorer.name] = errors[0].replace("\n", " ")[:300]
                note_once(f"--reward {scorer.name}: a response it fails on scores 0 (first: {first}); "
                          f"see reward/{scorer.name}/errors")  # fmt: skip
            for (e, t), score in zip(where, scores):
                if score is None:
                    self._errors[scorer.name] += 1
                else:
                    rewards[e][t] += weight * score
                    self._scores[scorer.name].append(score)
        for ep, r in zip(episodes, rewards):
            if ep:
                self._returns.append(sum(r))
                self._lengths.append(float(np.mean([it.response_tokens for it in ep])))
        return rewards

    def metrics(self) -> dict[str, float]:
        """Means since the last call: per source, errors, episode reward and the length signals."""
        out: dict[str, float] = {}
        for name, scores in self._scores.items():
            out[f"reward/{name}"] = float(np.mean(scores)) if scores else float("nan")
            out[f"reward/{name}/errors"] = float(self._errors[name])
        out["reward/errors"] = float(sum(self._errors.values()))
        if self._returns:
            out["reward/episode"] = float(np.mean(self._returns))
            out.update(length_signals(self._lengths, self._returns, self.pass_threshold))
        self._reset()
        return out

    def failed(self, metrics: dict[str, float]) -> dict[str, bool | None]:
        """Per source, from one iteration's `metrics` (merged over ranks, so that every rank reads them
        alike): True when a trained-on source failed on every response it was given (errors and no score,
        `reward/<name>` NaN), False when it scored something (or is not trained on, weight 0), None when
        it was given nothing to score. The loop counts the runs of True (LoopState.advance)."""
        out: dict[str, bool | None] = {}
        for scorer, weight in self.sources:
            errors = metrics.get(f"reward/{scorer.name}/errors", 0.0)
            mean = metrics.get(f"reward/{scorer.name}", float("nan"))
            out[scorer.name] = False if not np.isnan(mean) or not weight else (True if errors else None)
        return out


def length_signals(lengths, rewards, threshold: float) -> dict[str, float]:
    """Mean response length (tokens) of rewarded (>= threshold) vs unrewarded responses, and
    their correlation: a judge or rubric that pays for length shows it here first."""
    lengths, rewards = np.asarray(lengths, dtype=float), np.asarray(rewards, dtype=float)
    hit = rewards >= threshold
    corr = (
        float(np.corrcoef(lengths, rewards)[0, 1])
        if len(lengths) > 1 and lengths.std() and rewards.std()
        else float("nan")
    )
    return {
        "reward/len_rewarded": float(lengths[hit].mean()) if hit.any() else float("nan"),
        "reward/len_unrewarded": float(lengths[~hit].mean()) if (~hit).any() else float("nan"),
        "reward/len_reward_corr": corr,
    }
