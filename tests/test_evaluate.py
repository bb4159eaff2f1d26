"""Everyday use: evaluate a checkpoint (numbers recounted from the episodes), plots that are
real pictures, the env catalog, transcripts with prompts."""

import itertools
import json
import shutil

import numpy as np
import pytest
from PIL import Image

from algos.evaluation import pass_at_k
from algos.train import main as train_main
from envs.catalog import main as catalog_main
from scripts.evaluate import main as evaluate_main
from scripts.plot import main as plot_main

TINY = ["--num-groups", "2", "--group-size", "2", "--sft-steps", "4", "--sft-episodes", "4", "--eval-episodes", "2",
        "--max-new-tokens", "8", "--max-extra-groups", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval") / "run"
    flags = ["--iterations", "2", "--transcript-every", "2", "--transcripts", "2", "--output-dir", str(out), *TINY]
    assert train_main(flags) == 0
    return out


def not_blank(path) -> bool:
    pixels = np.asarray(Image.open(path).convert("RGB"))
    return pixels.shape[0] > 100 and pixels.shape[1] > 100 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20


@pytest.mark.slow
def test_report_numbers_match_a_direct_count_of_the_episodes(run, tmp_path):
    out = tmp_path / "report.json"
    flags = ["--checkpoint", str(run / "checkpoints" / "iter_2"), "--episodes", "6", "--samples", "3",
             "--baselines", "random", "expert", "base", "warm", "--output", str(out)]  # fmt: skip
    assert evaluate_main(flags) == 0
    report = json.loads(out.read_text())
    rows = [json.loads(line) for line in out.with_name("report_episodes.jsonl").read_text().splitlines()]
    assert report["env"] == "KeyDoor-v0" and set(report["policies"]) == {"model", "random", "expert", "base", "warm"}
    for name, p in report["policies"].items():
        mine = [r for r in rows if r["policy"] == name]
        assert len(mine) == p["episodes"] == 18  # 6 tasks x 3 samples
        assert p["success_rate"] == pytest.approx(np.mean([r["won"] for r in mine]))
        assert p["mean_return"] == pytest.approx(np.mean([r["return"] for r in mine]))
        assert p["mean_steps"] == pytest.approx(np.mean([r["steps"] for r in mine]))
        invalid = sum(r["invalid_steps"] for r in mine) / sum(r["steps"] for r in mine)
        assert p["invalid_action_rate"] == pytest.approx(invalid)
        lo, hi = p["success_ci95"]
        assert lo <= p["success_rate"] <= hi
        by_task = {}
        for r in mine:
            by_task.setdefault(r["seed"], []).append(r["won"])
        assert [(t["seed"], t["successes"]) for t in p["tasks"]] == [(s, sum(w)) for s, w in sorted(by_task.items())]
        for k in (1, 2, 3):  # pass@k by brute force: the share of k-subsets with a success
            direct = np.mean([np.mean([any(c) for c in itertools.combinations(w, k)]) for w in by_task.values()])
            assert p["pass_at_k"][str(k)] == pytest.approx(direct)
    assert report["policies"]["expert"]["success_rate"] == 1.0  # the expert solves every layout
    for name in ("warm", "base"):  # the checkpoint's lift over each other model, from the episodes themselves
        wins = {p: {} for p in ("model", name)}
        for r in sorted(rows, key=lambda r: r["traj"]):
            if r["policy"] in wins:
                wins[r["policy"]].setdefault(r["seed"], []).append(r["won"])
        diffs = [100 * (np.mean(wins["model"][s]) - np.mean(wins[name][s])) for s in wins["model"]]
        lift = report["lift"][name]
        assert (lift["method"], lift["tasks"], lift["episodes"]) == ("t", 6, 18)
        assert lift["points"] == pytest.approx(np.mean(diffs)) and lift["low"] <= lift["points"] <= lift["high"]
    md = out.with_suffix(".md").read_text()
    assert "model - warm: " in md
    assert "| expert | 100.0%" in md and "pass@2" in md
    for png in ("report_tasks.png", "report_steps.png"):
        assert not_blank(tmp_path / png), png


def test_pass_at_k_by_hand():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # C(3,2)/C(4,2) of pairs miss the success
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 3, 2) == 1.0


@pytest.mark.slow
def test_another_env_than_the_checkpoints(run, tmp_path):
    out = tmp_path / "hard.json"
    flags = ["--checkpoint", str(run / "checkpoints" / "iter_2"), "--env", "KeyDoor-Hard-v0", "--env-kwargs",
             "walls=0.0", "--episodes", "2", "--no-plots", "--output", str(out)]  # fmt: skip
    assert evaluate_main(flags) == 0
    report = json.loads(out.read_text())
    assert report["env"] == "KeyDoor-Hard-v0" and report["env_kwargs"] == {"walls": 0.0}


@pytest.mark.slow
def test_greedy_evaluation_is_reproducible(run, tmp_path):
    reports = []
    for name in ("a", "b"):
        out = tmp_path / f"{name}.json"
        flags = ["--checkpoint", str(run / "checkpoints" / "iter_2"), "--episodes", "4", "--greedy", "--no-plots",
                 "--output", str(out)]  # fmt: skip
        assert evaluate_main(flags) == 0
        reports.append(json.loads(out.read_text()))
    assert reports[0]["decoding"] == "greedy" and reports[0]["policies"] == reports[1]["policies"]


@pytest.mark.slow
def test_evaluate_bad_inputs_are_one_line_and_exit_2(run, tmp_path, capsys):
    ckpt = run / "checkpoints" / "iter_2"
    mismatched = tmp_path / "mismatched"
    shutil.copytree(ckpt, mismatched)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(mismatched)
    tok.add_tokens([f"<extra_{i}>" for i in range(2000)])  # a tokenizer that is not this model's
    tok.save_pretrained(mismatched)
    cases = [
        (["--checkpoint", str(tmp_path / "nope")], "not found"),
        (["--checkpoint", str(ckpt), "--episodes", "0"], "--episodes must be >= 1"),
        (["--checkpoint", str(ckpt), "--env", "KeyDor-v0"], "did you mean KeyDoor-v0"),
        (["--checkpoint", str(mismatched)], "checkpoint and tokenizer do not match"),
        (["--checkpoint", str(run / "checkpoints" / "iter_0"), "--baselines", "warm"], "needs the run's warmed-up"),
        (["--checkpoint", str(ckpt), "--baselines", "base", "--base-model", "./no/model"], "does not exist"),
    ]
    for flags, needle in cases:
        assert evaluate_main([*flags, "--output", str(tmp_path / "x.json")]) == 2, flags
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and needle in err and "\n" not in err, err
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_plot_overlays_runs(run, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for r in rows:  # a second run: same iterations, other values
        for k, v in r.items():
            if k != "iteration" and isinstance(v, float):
                r[k] = v * 0.5
    (other / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "curves.png"
    flags = [str(run), str(other), "--metrics", "eval/success_rate", "train/loss", "nope/metric", "--out", str(out)]
    assert plot_main([*flags, "--labels", "GiGPO", "half", "--smooth", "2"]) == 0
    assert not_blank(out) and "no run logged nope/metric" in capsys.readouterr().err
    assert plot_main([str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert plot_main([str(run), "--metrics", "nope/metric", "--out", str(out)]) == 2
    assert plot_main([str(run), "--labels", "a", "b", "--out", str(out)]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(e.startswith("error:") for e in errors)


@pytest.mark.slow
def test_transcripts_have_prompts_responses_rewards_and_advantages(run):
    records = [json.loads(line) for line in (run / "transcripts.jsonl").read_text().splitlines()]
    assert {r["iteration"] for r in records} == {2} and len(records) == 2  # --transcript-every 2, --transcripts 2
    step = records[0]["steps"][0]
    assert step["observation"] in step["prompt"] and "<|im_start|>assistant" in step["prompt"]
    assert {"response", "action", "reward", "advantage", "status"} <= set(step)


@pytest.mark.slow
def test_trace_credit_plays_a_group_from_a_run_checkpoint(run, tmp_path, capsys):
    from scripts.trace_credit import main as trace_main

    checkpoint = max((run / "checkpoints").glob("iter_*"), key=lambda p: int(p.name.split("_")[1]))
    assert trace_main(["--checkpoint", str(checkpoint), "--tasks", "3", "--output", str(tmp_path / "credit.md")]) == 0
    text = (tmp_path / "credit.md").read_text()
    assert text.startswith("# Credit on KeyDoor-v0: 2 episodes in 1 groups") and "| 0 (3) |" in text
    assert text.strip() == capsys.readouterr().out.strip()


def test_env_catalog(capsys, monkeypatch):
    from pathlib import Path

    assert catalog_main([]) == 0
    out = capsys.readouterr().out
    for env_id in ("KeyDoor-v0", "Arithmetic-v0", "WordProblems-v0", "TextWorld-Cooking-v0", "TextWorld-Games-v0"):
        assert env_id in out
    arith = out[out.index("Arithmetic-v0") :].splitlines()[1]
    assert "expert" in arith and "reference answer" in arith and "level=1" in arith
    assert catalog_main(["KeyDor-v0"]) == 2
    assert "did you mean KeyDoor-v0" in capsys.readouterr().err
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "examples"))
    assert catalog_main(["--import", "guessnum"]) == 0
    out = capsys.readouterr().out
    assert "GuessNumber-v0" in out and "none of the optional info keys" in out.split("GuessNumber-Bare-v0")[1]
    assert train_main(["--list-envs"]) == 0 and "KeyDoor-Hard-v0" in capsys.readouterr().out
