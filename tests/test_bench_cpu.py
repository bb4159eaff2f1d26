"""Smoke tests of benchmarks/bench_cpu.py and benchmarks/bench_zero_shot.py at their smallest sizes, on the
tiny model: every part runs to completion and writes the numbers it prints."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_cpu, bench_zero_shot


def test_bench_cpu_every_part_on_the_tiny_model(tmp_path, tiny_path, capsys):
    flags = ["--model", "tiny", "--batch", "2", "--tokens", "6", "--decode-batches", "2", "--prompt-tokens", "5",
             "--repeats", "1", "--decode-backends", "hf", "--no-compile", "--out", str(tmp_path)]  # fmt: skip
    assert bench_cpu.main(flags) == 0
    result = json.loads((tmp_path / "summary.json").read_text())
    assert result["matmul"]["float32"] > 0 and result["matmul"]["bfloat16"] > 0
    learner = result["learner"]["rows"]
    assert [r["precision"] for r in learner] == list(bench_cpu.PRECISIONS)
    assert all(r["seconds"] > 0 and r["ratio"] > 0 for r in learner)
    decode = result["decode"]["rows"]
    assert [(r["precision"], r["batch"]) for r in decode] == [(p, 2) for p in bench_cpu.PRECISIONS]
    assert "x pure matmul" in capsys.readouterr().out


def test_the_generate_part_times_every_arm_on_the_same_recorded_prompts(tmp_path, tiny_path, capsys):
    opening = "<|im_start|>system\nTask: open the door.<|im_end|>\n<|im_start|>user\nNow: "
    steps = [{"prompt": opening + text} for text in ("You are in the hall.", "You see a key.", "Exits: north.")]
    (tmp_path / "transcripts.jsonl").write_text(json.dumps({"steps": steps}) + "\n")
    flags = ["--parts", "generate", "--model", "tiny", "--repeats", "1", "--out", str(tmp_path)]
    assert bench_cpu.main([*flags, "--transcripts", str(tmp_path / "transcripts.jsonl")]) == 0
    g = json.loads((tmp_path / "summary.json").read_text())["generate"]
    assert g["prompts"] == 3 and g["sync_s"] > 0
    arms = {r["arm"]: r for r in g["rows"]}
    assert list(arms) == ["whole prompts", "shared opening", "LoRA adapter", "LoRA merged copy"]
    assert arms["shared opening"]["vs_shared"] == 1.0 and all(r["s"] > 0 for r in g["rows"])
    assert len({r["new_tokens"] for r in g["rows"]}) == 1  # one seed, one model function: the same samples
    assert "vs shared opening" in capsys.readouterr().out
    assert bench_cpu.main(flags) == 2  # no transcripts: one line, not a traceback
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.slow
def test_the_iteration_part_on_the_tiny_model_splits_every_env_steps_seconds(tmp_path, tiny_path, capsys):
    """Two precisions x two trainer iterations, each precision a real `algos.train` process: the parts of an
    env step's seconds add up to it, and the learner's parts to the update (`time/train_s`, which also holds
    the samples' assembly)."""
    small = "--num-groups 1 --group-size 4 --sft-steps 4 --sft-episodes 4 --max-new-tokens 8 --max-extra-groups 0"
    assert bench_cpu.main(["--parts", "iteration", "--model", "tiny", "--iterations", "2", "--iteration-args", small,
                           "--out", str(tmp_path)]) == 0  # fmt: skip
    result = json.loads((tmp_path / "summary.json").read_text())
    assert "matmul" not in result and isinstance(result["cpu_has_bf16"], bool)
    rows = result["iteration"]["rows"]
    assert [(r["precision"], r["iteration"]) for r in rows] == [("bf16", 1), ("bf16", 2), ("float32", 1), ("float32", 2)]
    for r in rows:
        assert r["env_steps"] > 0 and r["s_per_step"] > 0 and r["peak_rss_gib"] > 0
        parts = r["generate_s_per_step"] + r["update_s_per_step"] + r["rest_s_per_step"]
        assert parts == pytest.approx(r["s_per_step"])
        learner = r["forward_backward_s_per_step"] + r["recompute_s_per_step"] + r["optimizer_s_per_step"]
        assert learner <= r["update_s_per_step"] + 1e-9
        assert r["learner_tokens_per_step"] >= r["trained_tokens_per_step"]
    config = (tmp_path / "iteration-float32" / "config.yaml").read_text()
    assert "autocast: 'off'" in config and "eval_episodes: 0" in config
    assert [x["precision"] for x in result["iteration"]["runs"]] == ["bf16", "float32"]
    assert "s per env step after the first iteration" in capsys.readouterr().out


def test_iteration_rows_by_hand():
    m = {"iteration": 3, "rollout/steps": 10.0, "time/iteration_s": 5.0, "time/generate_s": 2.0, "time/train_s": 2.5,
         "time/forward_backward_s": 1.5, "time/recompute_s": 0.5, "time/optimizer_s": 0.25,
         "train/forward_tokens": 1600.0, "train/backward_tokens": 200.0, "memory/peak_rss_gib": 2.0}  # fmt: skip
    row = bench_cpu.iteration_row("bf16", m)
    assert (row["s_per_step"], row["generate_s_per_step"], row["update_s_per_step"]) == (0.5, 0.2, 0.25)
    assert row["rest_s_per_step"] == pytest.approx(0.05)
    assert (row["learner_tokens_per_step"], row["trained_tokens_per_step"]) == (160.0, 20.0)
    later = {**row, "iteration": 4, "env_steps": 30, "s_per_step": 0.1, "peak_rss_gib": 2.1}
    first = {**row, "iteration": 2, "s_per_step": 9.0}  # the first iteration is left out of the mean
    summary = bench_cpu.iteration_summary([first, row, later])
    assert summary["s_per_step"] == pytest.approx((0.5 * 10 + 0.1 * 30) / 40)
    assert summary["rss_growth_pct"] == pytest.approx(5.0) and summary["peak_rss_gib"] == 2.1


@pytest.mark.slow
def test_the_compiled_learner_row_compiles_every_layer_and_keeps_the_gradients(tiny_path):
    import torch
    from torch._dynamo.utils import counters

    from agents.model import load_model
    from algos.logprobs import Sample, collate, response_logprobs

    rows = bench_cpu.learner_part(tiny_path, batch=2, tokens=6, repeats=1, gflops=100.0)
    assert [r["precision"] for r in rows] == [*bench_cpu.PRECISIONS, bench_cpu.COMPILED]
    assert rows[-1]["compile_s"] > 0 and rows[-1]["seconds"] > 0
    # the compiled layers give the eager model's logprobs and gradients (float32: no autocast)
    samples = [Sample([1], [5, 6, 7, 8], 1.0, [0.0] * 4), Sample([1, 9], [4, 3], 1.0, [0.0] * 2)]
    grads = []
    for compiled in (False, True):
        model = load_model(tiny_path, "cpu", torch.float32).train()
        if compiled:
            bench_cpu.compile_layers(model)
        batch = collate(samples, 0, "cpu")
        counters.clear()
        logp, _ = response_logprobs(model, batch, 1.0)
        if compiled:  # one whole graph per layer: none fell back to eager, none broke
            assert counters["frames"]["ok"] == len(model.model.layers) and not counters["graph_break"]
        (logp * batch["mask"]).sum().backward()
        grads.append((logp.detach(), [p.grad.clone() for p in model.model.layers.parameters()]))
    (eager, eager_grads), (comp, comp_grads) = grads
    assert torch.allclose(eager, comp, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(eager_grads, comp_grads))


def test_forward_flops_by_hand():
    class Config:  # 1 layer, width 4, 2 heads of 2, 1 KV head, MLP 8, vocabulary 10
        hidden_size, num_hidden_layers, intermediate_size = 4, 1, 8
        num_attention_heads, num_key_value_heads, vocab_size, head_dim = 2, 1, 10, 2

    # per token: q 4x4 + k,v 2 x 4x2 + o 4x4 + MLP 3 x 4x8 + head 4x10 = 16 + 16 + 16 + 96 + 40 = 184 multiply-adds;
    # attention over 3 tokens, causal: 2 (QK, AV) x 2 heads x 2 dims x (1 + 2 + 3) = 48
    assert bench_cpu.forward_flops(Config, batch=1, tokens=3) == 2 * (3 * 184 + 48)


def test_bench_zero_shot_writes_a_cell_per_env_and_format(tmp_path, tiny_path):
    flags = ["--model", tiny_path, "--envs", "Arithmetic-v0", "--formats", "tag", "json", "--episodes", "2",
             "--max-new-tokens", "4", "--out", str(tmp_path)]  # fmt: skip
    assert bench_zero_shot.main(flags) == 0
    rows = json.loads((tmp_path / "summary.json").read_text())["rows"]
    assert [(r["env"], r["format"]) for r in rows] == [("Arithmetic-v0", "tag"), ("Arithmetic-v0", "json")]
    assert all(r["episodes"] == 2 and 0 <= r["parsed_rate"] <= 1 and 0 <= r["valid_rate"] <= 1 for r in rows)
    assert "| Arithmetic-v0 | json |" in (tmp_path / "summary.md").read_text()


def test_bench_zero_shot_caps_long_episodes_and_marks_the_rows(tmp_path, tiny_path):
    assert bench_zero_shot.step_limit("KeyDoor-Hard-v0", None) == 40  # the registered limit
    assert bench_zero_shot.step_limit("KeyDoor-Hard-v0", 3) == 3
    assert bench_zero_shot.step_limit("Arithmetic-v0", 3) == 1  # a shorter registered limit stays
    flags = ["--model", tiny_path, "--envs", "KeyDoor-Hard-v0", "Arithmetic-v0", "--formats", "tag", "--episodes",
             "2", "--max-new-tokens", "4", "--max-steps", "3", "--out", str(tmp_path)]  # fmt: skip
    assert bench_zero_shot.main(flags) == 0
    hard, arith = json.loads((tmp_path / "summary.json").read_text())["rows"]
    assert (hard["step_limit"], hard["capped"], arith["step_limit"], arith["capped"]) == (3, True, 1, False)
    assert hard["mean_steps"] <= 3
    assert "| KeyDoor-Hard-v0 | tag | 3 (capped) |" in (tmp_path / "summary.md").read_text()


def test_bench_zero_shot_rejects_a_cap_below_one(capsys):
    with pytest.raises(SystemExit) as e:
        bench_zero_shot.main(["--max-steps", "0"])
    assert e.value.code == 2 and "--max-steps must be >= 1" in capsys.readouterr().err


def test_the_before_preset_sets_every_option_the_current_preset_sets():
    """`--iteration-presets before` runs `--model smollm2-135m-instruct --config before.yaml`: the model brings the
    current preset underneath, so the old one must set each of its options, or the new values would show through."""
    import yaml

    from algos.cli import parse_config
    from algos.config import flat, from_flat

    current = yaml.safe_load(bench_cpu.ITERATION_PRESETS["preset"].read_text())
    before = yaml.safe_load(bench_cpu.ITERATION_PRESETS["before"].read_text())
    assert set(current) <= set(before)
    old = str(bench_cpu.ITERATION_PRESETS["before"])
    layered = flat(parse_config(["--model", "smollm2-135m-instruct", "--config", old]))
    assert layered == flat(from_flat(before))  # the old preset over the defaults, whatever the current one says
