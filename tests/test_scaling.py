"""Scaling features on CPU: LoRA (peft), torchrun end to end, gradient checkpointing, autocast,
and the distributed helpers that can be checked in one process."""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from agents.model import add_lora, enable_gradient_checkpointing, load_model
from agents.weights import merged_state_dict
from algos import distributed
from algos.collector import Step, Trajectory
from algos.config import LearnerConfig
from algos.learner import Learner, merge_ranks
from algos.logprobs import Sample
from algos.stats import Stats
from algos.train import main

sys.path.insert(0, str(Path(__file__).parent))
from cold_start import COLD_UPDATES
from test_distributed import torchrun  # noqa: E402

TINY_RUN = ["--num-groups", "2", "--group-size", "2", "--sft-steps", "3", "--sft-episodes", "3",
            "--eval-episodes", "2", "--max-new-tokens", "8", "--max-extra-groups", "2", *COLD_UPDATES]  # fmt: skip


@pytest.mark.slow
def test_lora_two_iterations_save_reload_and_base_untouched(tmp_path, tiny_path, monkeypatch):
    from agents.backend import HFBackend

    synced, sync = [], HFBackend.sync  # LoRA samples from a plain copy, refreshed with the adapter merged in

    def recorded(self, model):
        synced.append(not hasattr(self.model, "peft_config") and model is not self.model)
        sync(self, model)

    monkeypatch.setattr(HFBackend, "sync", recorded)
    out = tmp_path / "lora"
    flags = ["--lora-rank", "4", "--lora-alpha", "16", "--beta", "0.05", "--lora-save-merged", "--lr", "3e-3"]
    assert main(["--iterations", "2", "--output-dir", str(out), *TINY_RUN, *flags]) == 0
    assert len(synced) >= 3 and all(synced)  # after the warm-up and after each update
    ckpt = out / "checkpoints" / "iter_2"
    assert (ckpt / "adapter_config.json").is_file() and not (ckpt / "config.json").exists()  # the adapter only
    assert (ckpt / "adapter_model.safetensors").stat().st_size < 1_000_000  # not a full model in disguise

    base = load_model(tiny_path, "cpu", torch.float32)
    reloaded = load_model(str(ckpt), "cpu", torch.float32, adapter="train")
    for name, p in base.named_parameters():  # every base weight is bit-identical after warm-up + RL
        module, leaf = name.rsplit(".", 1)
        held = reloaded.get_base_model().get_submodule(module)
        held = getattr(held, "base_layer", held)
        assert torch.equal(getattr(held, leaf), p), name
    lora_b = [p for n, p in reloaded.named_parameters() if "lora_B" in n]
    assert lora_b and max(float(p.detach().abs().max()) for p in lora_b) > 0  # peft starts B at 0: the adapter trained

    ids = torch.tensor([[5, 17, 99, 300, 41, 8]])
    with torch.no_grad():
        adapted = reloaded(input_ids=ids).logits
        merged = AutoModelForCausalLM.from_pretrained(ckpt / "merged")(input_ids=ids).logits
        plain = base(input_ids=ids).logits
        merged_on_load = load_model(str(ckpt), "cpu", torch.float32)(input_ids=ids).logits  # adapter="merge"
    torch.testing.assert_close(merged, adapted, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(merged_on_load, adapted, rtol=1e-5, atol=1e-5)
    assert float((adapted - plain).abs().max()) > 1e-4

    state = torch.load(ckpt / "trainer_state.pt", weights_only=True)
    n_adapter = sum(1 for n, _ in reloaded.named_parameters() if "lora_" in n)
    assert len(state["optimizer"]["state"]) == n_adapter  # the optimizer holds the adapter only
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("train/kl") is not None and r["iteration"] == 2 for r in rows)

    # --resume continues the adapter run
    assert main(["--resume", str(out), "--iterations", "3"]) == 0
    assert (out / "checkpoints" / "iter_3" / "adapter_config.json").is_file()
    # scripts.evaluate takes the adapter checkpoint, and the warm-up's (also an adapter) as a baseline
    from scripts.evaluate import main as evaluate

    report = tmp_path / "eval.json"
    assert evaluate(["--checkpoint", str(out / "checkpoints" / "iter_3"), "--episodes", "2", "--output", str(report),
                     "--baselines", "warm"]) == 0  # fmt: skip
    policies = json.loads(report.read_text())["policies"]
    assert {"model", "warm"} <= set(policies) and 0.0 <= policies["model"]["success_rate"] <= 1.0


def test_merged_state_dict_is_w_plus_scaled_ba(tiny):
    model = add_lora(copy.deepcopy(tiny[0]), rank=2, alpha=6, dropout=0.0, targets="q_proj,v_proj")
    for n, p in model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.1)  # peft starts B at 0; make the adapter matter
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    merged = merged_state_dict(weights, model)
    assert set(merged) == set(tiny[0].state_dict())  # plain Hugging Face names, nothing else
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    a, b = weights[f"{prefix}.lora_A.default.weight"], weights[f"{prefix}.lora_B.default.weight"]
    w = weights[f"{prefix}.base_layer.weight"]
    torch.testing.assert_close(merged["model.layers.0.self_attn.q_proj.weight"], w + 3.0 * b @ a)  # 6 / 2
    torch.testing.assert_close(merged["model.layers.0.self_attn.k_proj.weight"],
                               tiny[0].state_dict()["model.layers.0.self_attn.k_proj.weight"])  # fmt: skip
    reference = model.merge_and_unload().state_dict()
    for k in reference:
        torch.testing.assert_close(merged[k], reference[k], rtol=1e-6, atol=1e-6)


def samples(n: int = 6) -> list[Sample]:
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        prompt = torch.randint(10, 900, (4 + i,), generator=g).tolist()
        response = torch.randint(10, 900, (1 + i % 3,), generator=g).tolist()
        out.append(Sample(prompt, response, (-1) ** i * 0.5, [-6.0] * len(response)))
    return out


def test_gradient_checkpointing_gives_the_same_gradients(tiny):
    grads = []
    for checkpointing in (False, True):
        model = copy.deepcopy(tiny[0])
        if checkpointing:
            enable_gradient_checkpointing(model)
        lrn = Learner(model, LearnerConfig(rollout_is="off", autocast="off", lr=0.0, micro_batch_size=4, num_minibatches=1), pad_id=0)
        lrn.update(samples())  # lr 0: the weights stay, the gradients are kept
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-5, atol=1e-7)


def test_bf16_autocast_update_runs_on_cpu(tiny):
    model = copy.deepcopy(tiny[0])
    before = model.lm_head.weight.clone()
    stats = Learner(model, LearnerConfig(rollout_is="off", autocast="bf16", num_minibatches=1), pad_id=0).update(samples())
    assert torch.isfinite(torch.tensor(stats["train/loss"])) and stats["train/skipped_frac"] == 0.0
    assert model.lm_head.weight.dtype == torch.float32 and not torch.equal(model.lm_head.weight, before)


def test_autocast_auto_is_bf16_where_the_cpu_has_bf16_units_and_the_model_is_large(monkeypatch, tiny):
    import agents.model

    big = 20_000_000  # parameters: where bf16 matmuls pay on a CPU
    toy = sum(p.numel() for p in tiny[0].parameters())
    for has, expected in ((True, "bf16"), (False, "off")):
        monkeypatch.setattr(agents.model, "cpu_has_bf16", lambda has=has: has)
        assert agents.model.precision("auto", "cpu", big) == expected
        assert agents.model.precision("auto", "cpu", toy) == "off"  # the 0.9M toy keeps float32
        assert agents.model.precision("bf16", "cpu", toy) == "bf16"  # asked for: always
        assert agents.model.precision("off", "cpu", big) == "off"


def test_bf16_asked_for_on_a_cpu_without_bf16_units_is_kept_and_noted(monkeypatch, capsys):
    import algos.resolve
    from algos.config import from_flat
    from algos.resolve import resolve

    for has in (False, True):
        monkeypatch.setattr(algos.resolve, "cpu_has_bf16", lambda has=has: has)
        monkeypatch.setattr("envs.base._NOTED", set())
        cfg = resolve(from_flat(dict(autocast="bf16")), distributed.SINGLE, "cpu")
        assert cfg.learner.autocast == "bf16"  # asked for: kept
        noted = [line for line in capsys.readouterr().err.splitlines() if "--autocast bf16 on a CPU" in line]
        assert len(noted) == (0 if has else 1) and (has or "--autocast auto picks float32" in noted[0])


def test_the_parameter_count_on_the_meta_device_is_the_loaded_models(tiny, tiny_path):
    from agents.model import parameter_count

    assert parameter_count(str(tiny_path)) == sum(p.numel() for p in tiny[0].parameters())


def test_bf16_rollouts_and_a_bf16_learner_start_at_ratio_one(tiny):
    """bf16 rollouts from the HF backend's cached decode and the learner's full forward round differently;
    under bf16, rollout_is auto recomputes the old logprobs, so the first PPO ratio is 1 and the mismatch
    shows in rollout_is/ (the tiny model's is small; SmolLM2's first-update token ratios reach 1.16)."""
    from agents.backend import HFBackend
    from agents.generation import Sampling
    from algos.config import from_flat
    from algos.resolve import resolve

    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "You are in the hall. Exits: north."}],
                                           add_generation_prompt=True, tokenize=True, return_dict=False)  # fmt: skip
    backend = HFBackend(model, [tokenizer.eos_token_id], tokenizer.pad_token_id, seed=0, precision="bf16")
    out, lps = backend.generate([prompt] * 8, Sampling(temperature=1.0, max_new_tokens=8))
    batch = [Sample(prompt, r, (-1.0) ** k, lp) for k, (r, lp) in enumerate(zip(out, lps))]
    cfg = resolve(from_flat(dict(autocast="bf16", num_minibatches=1, ppo_epochs=1, lr=1e-12)), distributed.SINGLE, "cpu")
    assert cfg.learner.rollout_is == "token"  # auto under bf16
    stats = Learner.for_run(model, cfg, tokenizer.pad_token_id, len(tokenizer)).update(batch)
    assert stats["train/ratio_mean"] == pytest.approx(1.0, abs=1e-5) and stats["train/ratio_max"] < 1 + 1e-4
    assert 0.9 < stats["rollout_is/ratio_mean"] < 1.1 and stats["rollout_is/ratio_max"] != 1.0  # the bf16 gap, measured
    plain = resolve(from_flat(dict(autocast="off", num_minibatches=1, ppo_epochs=1)), distributed.SINGLE, "cpu")
    assert plain.learner.rollout_is == "off"  # float32 HF rollouts match the learner: nothing to correct


def test_the_recompute_slices_like_the_first_epoch_so_its_ratio_is_exactly_one(tiny):
    """Under bf16 a sample's logprobs depend on the micro-batch it runs in (padding, the shared opening), so the
    recomputed old logprobs must come from the same micro-batches as the first epoch's: with mini-batches of 6 and
    micro-batches of 2 over prompts of several lengths, every first-epoch ratio is exactly 1 (lr 0: no step moves)."""
    from algos.config import from_flat
    from algos.resolve import resolve

    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    texts = ["You are in the hall.", "Exits: north, east.", "You see a red key here.", "Go."]
    batch = [Sample(tokenizer.encode(texts[k % 4]) * (1 + k % 3), [5 + k % 7, 9, 4 + k % 5], (-1.0) ** k, [-2.0] * 3)
             for k in range(12)]  # fmt: skip
    cfg = resolve(from_flat(dict(autocast="bf16", num_minibatches=2, micro_batch_size=2, ppo_epochs=1, lr=0.0,
                                 warmup_steps=1)), distributed.SINGLE, "cpu")  # fmt: skip
    stats = Learner.for_run(model, cfg, tokenizer.pad_token_id, len(tokenizer)).update(batch)
    assert stats["train/ratio_max"] == 1.0 and stats["train/ratio_mean"] == 1.0


@pytest.mark.slow
def test_torchrun_fsdp_end_to_end(tmp_path, tiny_path):
    out = tmp_path / "run"
    proc = torchrun(["-m", "algos.train", "--iterations", "2", "--save-every", "1", "--output-dir", str(out), *TINY_RUN])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("run directory:") == 1  # rank 0 speaks
    assert len(list(out.glob("events.out.tfevents.*"))) == 1  # and writes
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if "train/loss" in r] == [1, 2]
    assert all(r["memory/peak_rss_gib"] > 0 for r in rows if "train/loss" in r)
    assert len(json.loads((out / "memory.json").read_text())["ranks"]) == 2
    ckpt = out / "checkpoints" / "iter_2"
    trained = AutoModelForCausalLM.from_pretrained(ckpt)  # full weights gathered into HF format
    warm = AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "iter_0")
    assert any(not torch.equal(a, b) for a, b in zip(trained.parameters(), warm.parameters()))
    state = torch.load(ckpt / "trainer_state.pt", weights_only=True)
    assert state["world"] == {"size": 2, "parallel": "fsdp"} and len(state["rng_ranks"]) == 2
    # the run dies after iteration 1's checkpoint; 2 ranks resume it and log what it logged
    crashed = tmp_path / "crashed"
    shutil.copytree(out, crashed)
    shutil.rmtree(crashed / "checkpoints" / "iter_2")
    proc = torchrun(["-m", "algos.train", "--resume", str(crashed)])
    assert proc.returncode == 0 and "resuming after iteration 1" in proc.stderr, proc.stderr[-3000:]

    def metrics(run):  # time and memory are measured, the rest is computed
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/"))} for r in rows]

    assert metrics(crashed) == metrics(out)  # every rank's RNGs, the sharded optimizer state, the sampler
    proc = torchrun(["-m", "algos.train", "--resume", str(crashed)])  # finished: every rank stops, nothing written
    assert proc.returncode == 0 and "is finished" in proc.stderr and "took over" not in proc.stderr, proc.stderr[-3000:]
    assert metrics(crashed) == metrics(out) and not (crashed / ".lock").exists()
    # one process cannot resume a 2-rank run exactly: one line, exit 2
    assert main(["--resume", str(out), "--iterations", "3"]) == 2


def traj(gid: int, tid: int, seed: int, n_steps: int = 2) -> Trajectory:
    steps = [Step(gid, tid, t, "s", "o", [1], [2], [0.0], "r", "a", "ok", True, 0.0, False, False, False)
             for t in range(n_steps)]  # fmt: skip
    return Trajectory(gid, tid, seed, "task", steps)


def test_collect_share_numbers_like_one_process():
    def collect(seeds, sizes, gid, tid):
        out = []
        for g, (seed, size) in enumerate(zip(seeds, sizes)):
            for _ in range(size):
                out.append(traj(gid + g, tid + len(out), seed))
        return out

    seeds, sizes = [7, 8, 9], [3, 2, 4]
    direct = collect(seeds, sizes, 10, 100)
    for capacity in (4, 9):  # in passes, or at once
        shared, mine = distributed.collect_share(collect, capacity, seeds, sizes, 10, 100, distributed.SINGLE)
        assert mine == {10, 11, 12}
        assert [(t.group_id, t.traj_id, t.seed) for t in shared] == [(t.group_id, t.traj_id, t.seed) for t in direct]
        assert all(s.group_id == t.group_id and s.traj_id == t.traj_id for t in shared for s in t.steps)


def test_deal_balances_rollouts():
    world = distributed.World(0, 3)
    owner = distributed.deal([8, 8, 2, 2, 2, 2, 8], world)
    loads = [sum(s for s, o in zip([8, 8, 2, 2, 2, 2, 8], owner) if o == r) for r in range(3)]
    assert owner == [0, 1, 2, 2, 2, 2, 0] and loads == [16, 8, 8]
    assert distributed.aligned_chunks([1, 2, 3], 2, distributed.SINGLE) == [[1, 2], [3]]


def test_merge_ranks_adds_the_loss_shares_and_weighs_the_rest():
    ranks = [Stats(), Stats()]
    for loss in (0.4, 0.6):  # rank 0: two mini-batches, mean loss 0.5
        ranks[0].add("train/loss", loss)
    ranks[1].add("train/loss", 0.25)
    ranks[0].add("train/clip_frac", 0.02, 10.0)  # 10 tokens, 2 % clipped
    ranks[1].add("train/clip_frac", 0.0, 30.0)
    for r, ratio in ((0, 1.2), (0, 1.1), (1, 1.5)):
        ranks[r].add("train/ratio_max", ratio)
    merged = merge_ranks(ranks)
    assert merged["train/loss"] == pytest.approx(0.75)  # shares of one loss add up: 0.5 + 0.25
    assert merged["train/ratio_max"] == 1.5
    assert merged["train/clip_frac"] == pytest.approx(0.2 / 40)  # token-weighted
    metrics = Stats.merge_values([{"reward/env": 1.0, "reward/errors": 2.0},
                                  {"reward/env": float("nan"), "reward/errors": 1.0}],
                                 total=lambda key: key.endswith("errors"))  # fmt: skip
    assert metrics == {"reward/env": 1.0, "reward/errors": 3.0}


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--parallel", "zero3"], "parallel"),
        (["--lora-save-merged"], "--lora-rank"),
        (["--lora-rank", "4", "--lora-dropout", "1"], "lora_dropout"),
        (["--lora-rank", "-1"], "lora_rank"),
        (["--lora-rank", "4", "--lora-target-modules", ","], "lora-target-modules"),
        (["--autocast", "fp8"], "autocast"),
        (["--lora-rank", "4", "--lora-target-modules", "no_such_proj"], "no_such_proj"),
    ],
)
def test_scale_flags_bad_input_is_one_line(capsys, flags, needle):
    assert main(["--iterations", "1", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and needle in err and len(err.splitlines()) == 1


def test_adapter_without_its_base_model_is_one_line(tmp_path, capsys):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/nowhere/base"}))
    assert main(["--iterations", "1", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "LoRA adapter" in err and "/nowhere/base" in err and len(err.splitlines()) == 1


def test_more_ranks_than_groups_is_one_line(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert main(["--iterations", "1", "--num-groups", "2"]) == 2
    assert "smaller than the number of processes" in capsys.readouterr().err
    assert main(["--iterations", "1", "--num-groups", "4", "--backend", "vllm"]) == 2
    assert "needs --parallel ddp" in capsys.readouterr().err
    flags = ["--backend", "vllm", "--parallel", "ddp", "--vllm-tensor-parallel-size", "2"]
    assert main(["--iterations", "1", "--num-groups", "4", *flags]) == 2
    assert "tensor-parallel-size > 1 under torchrun" in capsys.readouterr().err
