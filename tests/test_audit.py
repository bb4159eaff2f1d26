"""The scorer audit: error rates a leaky verifier really has, a judge's exploit probe flagged,
agreement and length signals by hand, the script and the in-training hook end to end."""

import json
import random

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from algos.train import main as train_main
from rewards.audit import Honeypot, agreement, env_honeypots, run_audit, wilson
from rewards.base import FunctionScorer, RewardItem
from rewards.judge import JudgeScorer
from rewards.layer import RewardConfig, build_scorer, length_signals
from scripts.audit_rewards import main as audit_main

FAST_RUN = ["--env", "Arithmetic-v0", "--algo", "grpo", "--num-groups", "2", "--group-size", "2", "--sft-steps", "2",
            "--sft-episodes", "4", "--eval-episodes", "2", "--max-extra-groups", "1"]  # fmt: skip


def numeric_honeypots(n_wrong: int, n_correct: int, seed: int) -> list[Honeypot]:
    """Wrong answers miss by d, d uniform on +-1..+-20: a verifier that accepts misses up to 5
    passes 10 of those 40 values, so its true false-positive rate is exactly 0.25."""
    rng = random.Random(seed)
    out = []
    for i in range(n_wrong + n_correct):
        answer = rng.randint(30, 300)
        wrong = i < n_wrong
        said = answer + rng.choice([d for d in range(-20, 21) if d]) if wrong else answer
        it = RewardItem.from_response(f"q{i}", f"<action>{said}</action>", str(answer), task_type="add")
        out.append(Honeypot(it, not wrong, "miss" if wrong else "plain"))
    return out


def test_audit_estimates_a_leaky_verifiers_false_positive_rate():
    honeypots = numeric_honeypots(n_wrong=400, n_correct=100, seed=1)
    leaky = build_scorer("numeric", RewardConfig(reward_tolerance=5.0))  # a tolerance set far too loose
    leaky.name = "leaky"
    strict = build_scorer("numeric", RewardConfig())
    report = run_audit([leaky, strict], honeypots, seed=3)
    r = report["scorers"]["leaky"]
    # stated tolerance: 3 binomial standard deviations at n=400, sqrt(0.25 * 0.75 / 400) = 0.0217
    assert abs(r["false_positive_rate"] - 0.25) < 0.065
    assert r["fpr_ci95"][0] <= 0.25 <= r["fpr_ci95"][1]
    assert r["false_negative_rate"] == 0.0 and r["n_wrong"] == 400 and r["n_correct"] == 100
    s = report["scorers"]["numeric"]
    assert s["false_positive_rate"] == 0.0 and s["false_negative_rate"] == 0.0 and s["flagged_probes"] == []
    assert report["agreement"]["leaky~numeric"]["on"] == "honeypots"


def test_env_honeypots_are_labelled_by_the_env_and_expose_a_strict_exact_match():
    honeypots = env_honeypots("Arithmetic-v0", 60, seed=0, env_kwargs={"level": 2})
    assert len(honeypots) == 60 and sum(h.correct for h in honeypots) == 30
    numeric, exact = build_scorer("numeric", RewardConfig()), build_scorer("exact", RewardConfig())
    report = run_audit([numeric, exact], honeypots)
    assert report["scorers"]["numeric"]["false_positive_rate"] == 0.0
    assert report["scorers"]["numeric"]["false_negative_rate"] == 0.0
    decimal = sum(h.kind == "decimal_form" for h in honeypots if h.correct)  # "14.0": right, not the same text
    assert decimal == 10
    assert report["scorers"]["exact"]["false_negative_rate"] == pytest.approx(decimal / 30)
    kinds = {h.kind for h in honeypots if not h.correct}
    assert {"near_miss", "other_answer", "hedge", "right_in_thinking", "far_miss"} <= kinds


def test_judge_exploit_probes_are_flagged_and_a_verifiers_are_not(tiny):
    model, tok = tiny
    judge = JudgeScorer(model, tok)  # an untrained judge: it cannot tell ":" from a right answer
    numeric = build_scorer("numeric", RewardConfig())
    report = run_audit([numeric, judge], env_honeypots("Arithmetic-v0", 20))
    flagged = report["scorers"]["judge"]["flagged_probes"]
    assert ":" in flagged and "Thought process:" in flagged
    assert report["scorers"]["judge"]["probes"][":"] > 0.1 * report["scorers"]["judge"]["mean_correct"]
    assert report["scorers"]["numeric"]["flagged_probes"] == []
    assert max(report["scorers"]["numeric"]["probes"].values()) == 0.0


def test_mixing_never_mixes_up_whose_score_is_whose():
    seen = []

    def fingerprint(it: RewardItem) -> float:
        seen.append(it.response)
        return (hash(it.response) % 1000) / 1000

    honeypots = numeric_honeypots(20, 20, seed=2)
    real = [RewardItem.from_response("q", f"<action>{i}</action>", "1") for i in range(30)]
    report = run_audit([FunctionScorer("fp", fingerprint)], honeypots, real, seed=5)
    assert seen[:40] != [h.item.response for h in honeypots]  # honeypots arrive mixed in, not first
    wrong = [fingerprint(h.item) for h in honeypots if not h.correct]
    assert report["scorers"]["fp"]["mean_wrong"] == pytest.approx(np.mean(wrong))
    assert report["real_responses"] == 30 and report["scorers"]["fp"]["errors"] == 0


def test_agreement_wilson_and_length_signals_by_hand():
    a = agreement([1.0, 1.0, 0.0, 0.0, 1.0, None], [1.0, 0.0, 0.0, 0.0, 1.0, 1.0], threshold=0.5)
    # observed 4/5; chance = 0.6 * 0.4 + 0.4 * 0.6 = 0.48; kappa = (0.8 - 0.48) / 0.52
    assert a["n"] == 5 and a["agreement"] == pytest.approx(0.8) and a["kappa"] == pytest.approx(0.32 / 0.52)
    assert a["pearson"] == pytest.approx(np.corrcoef([1, 1, 0, 0, 1], [1, 0, 0, 0, 1])[0, 1])
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    s = length_signals([10, 20, 30, 40], [1.0, 0.0, 1.0, 0.0], threshold=0.5)
    assert s["reward/len_rewarded"] == 20 and s["reward/len_unrewarded"] == 30
    assert s["reward/len_reward_corr"] == pytest.approx(np.corrcoef([10, 20, 30, 40], [1, 0, 1, 0])[0, 1])


def test_audit_script_writes_the_report(tmp_path, capsys):
    out = tmp_path / "audit.json"
    assert audit_main(["--reward", "numeric,exact,format,rubric", "--honeypots", "40", "--output", str(out),
                       "--logdir", str(tmp_path / "tb")]) == 0  # fmt: skip
    report = json.loads(out.read_text())
    assert set(report["scorers"]) == {"numeric", "exact", "format", "rubric"}
    assert report["scorers"]["format"]["false_positive_rate"] == 1.0  # format pays well-formed wrong answers
    assert "<action>:</action>" in report["scorers"]["format"]["flagged_probes"]
    assert "| numeric | 0.000" in capsys.readouterr().out
    tags = EventAccumulator(str(tmp_path / "tb")).Reload().Tags()["scalars"]
    assert "audit/format/false_positive_rate" in tags


@pytest.mark.parametrize(
    ("flags", "needle"),
    [(["--reward", "numric"], "did you mean 'numeric'"), (["--env", "KeyDoor-v0", "--reward", "numeric"], "gives no info['answer']"),
     (["--env", "Nope-v0"], "unknown env id"), (["--honeypots", "0"], "--honeypots must be >= 2"),
     (["--reward", "judge"], "needs --judge-model")],
)  # fmt: skip
def test_audit_script_bad_input_is_one_line(tmp_path, capsys, flags, needle):
    assert audit_main([*flags, "--output", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and err.startswith("error:")


@pytest.mark.slow
def test_training_with_composed_rewards_and_the_audit_hook(tmp_path):
    out = tmp_path / "run"
    flags = ["--reward", "numeric=1,format=0.1,judge=0", "--judge-model", "tiny", "--audit-every", "1"]
    assert train_main([*FAST_RUN, *flags, "--iterations", "2", "--output-dir", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    it = [r for r in rows if "reward/numeric" in r]
    assert len(it) == 2 and all(r["reward/errors"] == 0 for r in it)
    assert all(0.0 <= r["reward/judge"] <= 1.0 for r in it)
    audits = json.loads((out / "reward_audit.json").read_text())["audits"]
    assert [a["iteration"] for a in audits] == [1, 2]
    assert audits[0]["scorers"]["judge"]["flagged_probes"] and not audits[0]["scorers"]["numeric"]["flagged_probes"]
    assert "numeric~judge" in audits[0]["agreement"] and audits[0]["agreement"]["numeric~judge"]["on"] == "real"
    tags = EventAccumulator(str(out)).Reload().Tags()["scalars"]
    assert {"reward/numeric", "audit/judge/probes_flagged", "audit/numeric/false_positive_rate"} <= set(tags)
    record = json.loads((out / "transcripts.jsonl").read_text().splitlines()[0])
    assert record["steps"][0]["answer"] is not None


@pytest.mark.parametrize(
    ("flags", "needle"),
    [(["--reward", "numeric", "--env", "KeyDoor-v0"], "KeyDoor-v0 does not give"),
     (["--reward", "rubric", "--rubric", "BAD"], "rubrics.default[0].weight: must be > 0"),
     (["--reward", "judge"], "needs --judge-model"),
     (["--reward", "judge", "--judge-model", "./no/such/judge"], "does not exist"),
     (["--reward", "regex"], "needs --reward-regex"),
     (["--reward", "numeric", "--judge-mode", "vote"], "unknown judge_mode"),
     (["--reward", "nosuchpkg:fn"], "cannot load 'fn' from 'nosuchpkg'")],
)  # fmt: skip
def test_bad_reward_config_is_one_line_and_exit_2(tmp_path, capsys, flags, needle):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rubrics: {default: [{name: a, check: exact, weight: 0}]}\n")
    flags = [str(bad) if f == "BAD" else f for f in flags]
    args = [*FAST_RUN, *flags, "--output-dir", str(tmp_path / "x")]
    if "--env" in flags:
        args = args[2:]  # the flag's own env replaces FAST_RUN's
    assert train_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_honeypot_and_response_files(tmp_path, capsys):
    pots = tmp_path / "pots.jsonl"
    rows = [{"question": "2+2?", "answer": "4", "response": "<action>4</action>", "correct": True},
            {"question": "2+2?", "answer": "4", "response": "<action>5</action>", "correct": False, "kind": "mine"}]  # fmt: skip
    pots.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    responses = tmp_path / "transcripts.jsonl"  # a run's transcripts: the last step is the answer
    responses.write_text(json.dumps({"steps": [{"observation": "2+2?", "response": "<action>4</action>",
                                                "answer": "4"}]}) + "\n")  # fmt: skip
    out = tmp_path / "a.json"
    flags = ["--reward", "numeric,exact", "--honeypots", "0", "--honeypot-file", str(pots), "--responses",
             str(responses), "--output", str(out)]  # fmt: skip
    assert audit_main(flags) == 0
    report = json.loads(out.read_text())
    assert report["honeypots"] == 2 and report["real_responses"] == 1
    assert report["scorers"]["numeric"]["pass_rate_by_kind"] == {"correct/file": 1.0, "wrong/mine": 0.0}
    assert report["agreement"]["numeric~exact"] == {"n": 1, "agreement": 1.0, "kappa": None, "pearson": None,
                                                    "on": "real"}  # fmt: skip
    pots.write_text('{"question": "q", "answer": "4"}\n')
    assert audit_main(flags) == 2
    assert f"{pots}:1: a honeypot row needs question, answer, response, correct" in capsys.readouterr().err
