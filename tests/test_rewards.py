"""Reward sources with hand-built responses and hand-computed scores; rubric validation; the
judge on the tiny model; the composed layer; error isolation."""

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envs.arithmetic import RUBRIC
from rewards import verifiers
from rewards.base import FunctionScorer, RewardItem, score_batch
from rewards.judge import JudgeScorer, verdict
from rewards.layer import RewardConfig, RewardLayer, build_scorer, parse_spec
from rewards.rubric import RubricError, load_rubrics


def item(response: str, answer: str | None = "14", task_type: str = "add", **kw) -> RewardItem:
    return RewardItem.from_response("What is 9 + 5?", response, answer, task_type=task_type, **kw)


def brevity(it: RewardItem) -> float:  # a user's own source, loaded as test_rewards:brevity
    return 1.0 if len(it.response) < 30 else 0.0


# -- verifiers ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [("42", 42.0), ("-3", -3.0), ("+7", 7.0), ("42.0", 42.0), ("42.", 42.0), ("1,024", 1024.0), ("3/4", 0.75),
     (".5", 0.5), ("1/0", None), ("1e5", None), ("inf", None), ("nan", None), ("", None), (".", None),
     ("12 apples", None), ("1,02", None), ("9" * 100, None)],
)  # fmt: skip
def test_parse_number(text, value):
    assert verifiers.parse_number(text) == value


def test_numeric_tolerances_and_partial_credit():
    assert verifiers.numeric("14", "14") == 1.0
    assert verifiers.numeric("14.0000001", "14") == 1.0  # inside the default 1e-6
    assert verifiers.numeric("14.01", "14") == 0.0
    assert verifiers.numeric("14.01", "14", tolerance=0.05) == 1.0
    assert verifiers.numeric("110", "100", rel_tolerance=0.1) == 1.0
    # partial: 1 - |13 - 14| / (0.2 * 14) = 1 - 1/2.8
    assert verifiers.numeric("13", "14", partial_within=0.2) == pytest.approx(1 - 1 / 2.8)
    assert verifiers.numeric("20", "14", partial_within=0.2) == 0.0
    assert verifiers.numeric("fourteen", "14") == 0.0
    with pytest.raises(ValueError, match="not a number"):
        verifiers.numeric("14", "fourteen")


@pytest.mark.parametrize(
    ("response", "ok"),
    [("<action>14</action>", True), ("<think>9 + 5</think><action>14</action>", True),
     ("  <think>a\nb</think>\n<action> 14 </action>\n", True), ("<action></action>", False),
     ("<action> </action>", False), ("Sure: <action>14</action>", False), ("<action>14</action> done", False),
     ("<action>1</action><action>2</action>", False), ("<think><think>x</think></think><action>1</action>", False),
     ("14", False), (":", False), ("", False)],
)  # fmt: skip
def test_format_reward(response, ok):
    assert verifiers.well_formed(response) == float(ok)


def test_exact_regex_contains_length():
    assert verifiers.exact("  Go   NORTH ", "go north") == 1.0
    assert verifiers.exact("go north!", "go north") == 0.0
    assert verifiers.regex("so it is 14.", r"\b{answer}\b", "14") == 1.0
    assert verifiers.regex("so it is 144.", r"\b{answer}\b", "14") == 0.0
    assert verifiers.regex("1+1", r"{answer}", "1+1") == 1.0  # the answer is escaped, "+" is literal
    assert verifiers.contains("The Answer: 14", "answer: 14") == 1.0
    assert verifiers.max_length(" 1234 ", 4) == 1.0 and verifiers.max_length("12345", 4) == 0.0


@given(st.text(max_size=300))
def test_verifiers_never_raise_on_any_text(text):
    for score in (verifiers.numeric(text, "14"), verifiers.exact(text, "14"), verifiers.well_formed(text),
                  verifiers.regex(text, r"{answer}", "14")):  # fmt: skip
        assert score in (0.0, 1.0)


# -- rubrics -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("response", "task_type", "answer", "score"),
    [("<action>14</action>", "add", "14", 1.0),
     # near miss: correct = 1 - 1/2.8 (weight 4), format 1, concise 1 -> (4 (1 - 1/2.8) + 2) / 6
     ("<think>x</think><action>13</action>", "add", "14", (4 * (1 - 1 / 2.8) + 2) / 6),
     ("Sure! <action>14</action>", "add", "14", 5 / 6),  # right answer, not well formed
     ("<action>the answer is 14</action>", "add", "14", 0.0),  # gate: not a number, nothing
     ("<action>20</action>", "add", "14", 0.0),  # too far for partial credit: gate
     ("14", "add", "14", 0.0),  # no action tag
     ("<think>3 * 4 = 12, plus 5</think><action>17</action>", "word-two-step", "17", 1.0),
     ("<action>17</action>", "word-two-step", "17", 5 / 6)],  # no work shown
)  # fmt: skip
def test_shipped_rubric_scores_by_hand(response, task_type, answer, score):
    rubrics = load_rubrics(RUBRIC)
    assert rubrics.for_task(task_type).score(item(response, answer, task_type)) == pytest.approx(score)


def test_json_rubric_with_every_check(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"rubrics": {"default": [
        {"name": "right", "check": "exact", "weight": 2},
        {"name": "says", "check": "contains", "text": "because", "weight": 1},
        {"name": "env", "check": "env", "weight": 1},
        {"name": "ref", "check": "regex", "pattern": "={answer}", "weight": 1, "target": "response"},
    ]}}))  # fmt: skip
    rubric = load_rubrics(path).for_task("anything")
    good = item("<think>because 9+5=14</think><action>14</action>", env_reward=1.0)
    assert rubric.score(good) == 1.0
    assert rubric.score(item("<action>14</action>")) == pytest.approx(2 / 5)  # exact only (env reward 0)
    assert "- right (weight 2)" in rubric.describe()


BAD_RUBRICS = [
    ("rubrics: {}\n", "rubrics: the file must hold a non-empty mapping"),
    ("rubrics: {default: [{name: a}]}\n", "rubrics.default[0].check: missing"),
    ("rubrics: {default: [{check: exact}]}\n", "rubrics.default[0].name: missing"),
    ("rubrics: {default: [{name: a, check: numerc}]}\n", "rubrics.default[0].check: unknown check 'numerc'"),
    ("rubrics: {default: [{name: a, check: exact, weight: -1}]}\n", "rubrics.default[0].weight: must be a number"),
    ("rubrics: {default: [{name: a, check: exact, weight: heavy}]}\n", "rubrics.default[0].weight: must be a number"),
    ("rubrics: {default: [{name: a, check: exact, weight: 0}]}\n", "rubrics.default[0].weight: must be > 0"),
    ("rubrics: {default: [{name: a, check: regex}]}\n", "rubrics.default[0].pattern: missing"),
    ("rubrics: {add: [{name: a, check: regex, pattern: '('}]}\n", "rubrics.add[0].pattern: invalid regular expression"),
    ("rubrics: {default: [{name: a, check: numeric, tolerence: 1}]}\n", "rubrics.default[0].tolerence: not a field"),
    ("rubrics: {default: [{name: a, check: exact, on: action}]}\n", "rubrics.default[0].True: a key read as a boolean"),
    ("rubrics: {default: [{name: a, check: exact, target: thinking}]}\n", "rubrics.default[0].target: must be action"),
    ("rubrics: {default: [{name: a, check: max_length, max_chars: 0}]}\n", "rubrics.default[0].max_chars: must be"),
    ("rubrics: {default: [{name: a, check: exact, gate: 'yes'}]}\n", "rubrics.default[0].gate: must be true or false"),
    ("rubrics: {default: [{name: a, check: exact}, {name: a, check: format}]}\n", "criterion names must be unique"),
    ("rubrics: {default: {name: a, check: exact}}\n", "rubrics.default: must be a non-empty list"),
    ("rubrics: {default: [{name: a, check: exact}]}\nrubricz: 1\n", "rubricz: unknown top-level field"),
    ("rubrics: [oops\n", "not valid YAML"),
]


@pytest.mark.parametrize(("text", "needle"), BAD_RUBRICS, ids=[n for _, n in BAD_RUBRICS])
def test_bad_rubric_is_one_line_naming_the_field(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(RubricError) as e:
        load_rubrics(path)
    assert needle in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


# -- the composed layer and error isolation ----------------------------------------------
def test_layer_composes_step_and_outcome_sources_by_hand():
    sources = [(build_scorer(n, RewardConfig()), w) for n, w in parse_spec("env=1,format=0.5,numeric=2")]
    layer = RewardLayer(sources)
    episodes = [
        [item("<action>go</action>", None, env_reward=0.0), item("<action>14</action>", env_reward=1.0)],
        [item("13", env_reward=0.0)],
    ]
    # ep 0: step 0 = env 0 + 0.5 format; step 1 (the answer) = env 1 + 0.5 format + 2 numeric
    # ep 1: no tag: env 0, format 0, numeric 0
    assert layer.score_episodes(episodes) == [[0.5, 3.5], [0.0]]
    m = layer.metrics()
    assert m["reward/env"] == pytest.approx(1 / 3) and m["reward/format"] == pytest.approx(2 / 3)
    assert m["reward/numeric"] == 0.5 and m["reward/episode"] == 2.0 and m["reward/errors"] == 0.0
    assert layer.metrics()["reward/errors"] == 0.0  # reset after reading


def test_a_scorer_that_raises_on_one_response_counts_an_error():
    def picky(it: RewardItem) -> float:
        if "boom" in it.response:
            raise RuntimeError("cannot score this")
        return 1.0

    class BatchBomb:  # a batched scorer whose whole batch fails when one item is bad
        name, scope = "batch", "outcome"

        def score(self, items):
            if any("boom" in it.response for it in items):
                raise RuntimeError("batch failed")
            return [0.5] * len(items)

    layer = RewardLayer([(FunctionScorer("picky", picky), 1.0), (BatchBomb(), 1.0)])
    episodes = [[item("<action>1</action>")], [item("boom")], [item("<action>2</action>")]]
    assert layer.score_episodes(episodes) == [[1.5], [0.0], [1.5]]
    m = layer.metrics()
    assert m["reward/picky/errors"] == 1.0 and m["reward/batch/errors"] == 1.0 and m["reward/errors"] == 2.0
    nan_scorer = FunctionScorer("nan", lambda it: math.nan)
    assert score_batch(nan_scorer, [item("x")]) == [None]
    assert FunctionScorer("numeric", lambda it: 1.0).score([item("x", answer=None)]) == [None]  # no reference


def test_custom_source_by_module_path():
    spec = parse_spec("numeric,test_rewards:brevity=0.5")
    assert spec == [("numeric", 1.0), ("test_rewards:brevity", 0.5)]
    layer = RewardLayer([(build_scorer(n, RewardConfig()), w) for n, w in spec])
    long = "<think>" + "x" * 40 + "</think><action>14</action>"
    assert layer.score_episodes([[item("<action>14</action>")], [item(long)]]) == [[1.5], [1.0]]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [("numric", "did you mean 'numeric'"), ("numeric=heavy", "must be a number"), ("numeric,numeric", "twice"),
     ("numeric,", "empty source"), ("numeric=0", "every weight is 0"), ("numeric=inf", "finite")],
)  # fmt: skip
def test_bad_reward_spec(spec, needle):
    with pytest.raises(ValueError, match=needle):
        parse_spec(spec)


# -- the judge -----------------------------------------------------------------------------
def test_judge_expected_score_is_padding_invariant_and_bounded(tiny):
    model, tok = tiny
    judge = JudgeScorer(model, tok, batch_size=8, rubrics=load_rubrics(RUBRIC))
    items = [item("<action>14</action>"), item(":"), item("<think>" + "long " * 30 + "</think><action>3</action>")]
    together = judge.score(items)
    alone = [judge.score([it])[0] for it in items]
    assert all(0.0 <= s <= 1.0 for s in together)
    assert together == pytest.approx(alone, abs=1e-5)  # left padding does not change a verdict
    prompt = tok.decode(judge.render(items[0]))
    assert "Reference answer: 14" in prompt and "reference number" in prompt  # the rubric's criteria


@pytest.mark.parametrize(
    ("reply", "score"), [("7", 7 / 9), ("Score: 9/9", 1.0), (" 0", 0.0), ("no idea", None), ("", None)]
)
def test_judge_verdict_parsing(reply, score):
    assert verdict(reply) == score


def test_judge_reply_without_a_digit_is_an_error_not_a_crash(tiny):
    model, tok = tiny
    judge = JudgeScorer(model, tok, mode="generate")
    items = [item("<action>14</action>"), item("{response} {answer} }{"), item("")]
    direct = judge.score(items)  # the untrained judge mostly replies without a digit
    layer = RewardLayer([(judge, 1.0)])
    rewards = layer.score_episodes([[it] for it in items])
    assert layer.metrics()["reward/judge/errors"] == sum(s is None for s in direct)
    assert [r[0] for r in rewards] == [0.0 if s is None else s for s in direct]


# -- the Gymnasium wrapper -----------------------------------------------------------------
def test_scored_reward_wrapper_scores_the_whole_response():
    import gymnasium as gym

    import envs  # noqa: F401
    from rewards.wrappers import ScoredReward

    env = ScoredReward(gym.make("Arithmetic-v0", level=2), "numeric=1,format=0.5,rubric=0")
    _, info = env.reset(seed=4)
    answer = info["answer"]
    _, reward, term, _, info = env.step(f"<think>adding</think><action>{answer}</action>")
    assert term and reward == 1.5 and info["env_reward"] == 1.0
    assert info["reward_parts"] == {"numeric": 1.0, "format": 1.0, "rubric": 1.0}
    env.reset(seed=4)
    _, reward, _, _, info = env.step(f"It is {answer}")  # no tag: the env gets the raw text, not a number
    assert reward == 0.0 and info["env_reward"] == 0.0 and not info["action_valid"]


def test_scored_reward_wrapper_on_a_multi_step_env():
    import gymnasium as gym

    import envs  # noqa: F401
    from rewards.wrappers import ScoredReward

    env = ScoredReward(gym.make("KeyDoor-v0"), "env,format=0.1")
    _, info = env.reset(seed=0)
    _, reward, _, _, info = env.step(f"<action>{info['expert_action']}</action>")
    assert reward == pytest.approx(info["env_reward"] + 0.1) and info["reward_parts"]["format"] == 1.0
    with pytest.raises(ValueError, match="did you mean 'numeric'"):
        ScoredReward(gym.make("KeyDoor-v0"), "numric")
