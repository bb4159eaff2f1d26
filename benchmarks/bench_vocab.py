"""A real vocabulary's cost, measured side by side in one run: memory, update time, sampling.

    python -m benchmarks.bench_vocab                         # all three parts, about 3 minutes on 2 cores
    python -m benchmarks.bench_vocab --parts memory --samples 32

The model is the real-vocabulary profile `tiny-qwen2.5` (agents/profiles.py): 151,936 head rows
for 151,665 tokens, tied embeddings, a 2-layer body of width 64. Its LM head is nearly all of its
compute, which is what this benchmark is for: it shows what the vocabulary costs, not the body.

memory    Peak RSS of one `Learner.update` (1 mini-batch, 1 micro-batch of --samples samples x
          --response-tokens tokens, prompts of about --prompt-tokens), each configuration in a
          fresh process (its `ru_maxrss`, started through a bare launcher because a child's
          ru_maxrss starts at its parent's peak; checked against /proc VmHWM): the profile's body with
          V = 151,936 and with a --small-vocab-row vocabulary (same config otherwise, random init,
          both built from the config so neither pays for loading a file), and V = 151,936 on the
          plain path (full [B, R, V] logits, log_softmax, gather: the "before" of
          algos/lm_head.py). Both models see the same token ids (all < --small-vocab). Read: the
          ratio of the peaks (target <= 1.5), and the peak above the child's imports minus the
          model state (weights, gradients, AdamW moments), which is what the update holds beyond
          its parameters.
time      On one collated batch of --time-samples samples (the same tokens for every variant;
          the head's work is linear in the tokens), medians over --repeats after a warm-up, the
          variants interleaved: one forward + backward of `response_logprobs` + the PPO loss
          (chunked head, and plain path), against a pure replay of the same matmuls: the body
          forward + backward (`model.model`) plus, per head chunk, h @ W.T (forward), h @ W.T
          again (the backward's recompute), g @ W and g.T @ h with a random g, nothing else. The
          target (<= 1.2) compares those two; the 3-matmul replay (no recompute) is what a head
          that kept its logits would do. The full `Learner.update` is compared with the replay
          plus a pure optimizer step (grad clipping + AdamW), its only extra model work.
sampling  `agents.backend.sample` as a share of a decode step, HF backend, the profile loaded as
          training loads it, prompts built by the agent for KeyDoor-v0 resets: per step the
          backend's `decode` (one cached forward for the batch) and `sample` on its fresh logits,
          medians over --decode-steps, for T = 1 (the default), greedy and top-p 0.9, at each of
          --batch-sizes. Target: sample <= 20 % of decode + sample.

Timings run on --threads torch threads (default 1): on a shared 2-core machine a second thread
waits for a time slice at every parallel op, which made every timing 3-5x slower and noisier
under load. Memory children run on torch's default. --hidden times another body width (the
head's non-matmul work per logit is fixed, its matmul work grows with the width). Prints the
tables and writes them to --json (default runs/bench_vocab/summary.json), with the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

PARTS = ("memory", "time", "sampling")
ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30


def profile_model(vocab: int, seed: int = 0, hidden: int = 0):
    """The profile's architecture with `vocab` embedding rows (tied), random init, train mode; with
    `hidden`, that width instead of 64 (same 2 heads, so head_dim = hidden / 2)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from agents.model import resolve_model
    from agents.profiles import QWEN25

    config = AutoConfig.from_pretrained(resolve_model(QWEN25))
    config.vocab_size = vocab
    config.hidden_size = hidden or config.hidden_size
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    return model.train()


def make_samples(n: int, response: int, prompt: int, max_id: int, old_logprob: float, seed: int = 0) -> list:
    """n distinct samples: prompts of prompt +- 10 % tokens, `response` tokens, ids < max_id, advantages +-1."""
    from algos.logprobs import Sample

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        p = [rng.randrange(max_id) for _ in range(rng.randint(prompt - prompt // 10, prompt + prompt // 10))]
        r = [rng.randrange(max_id) for _ in range(response)]
        out.append(Sample(p, r, rng.choice([-1.0, 1.0]), [old_logprob] * response))
    return out


@contextlib.contextmanager
def plain_head():
    """response_logprobs on the plain path: full logits, log_softmax, gather (no chunked head)."""
    from algos import lm_head

    applies = lm_head.applies
    lm_head.applies = lambda model: False
    try:
        yield
    finally:
        lm_head.applies = applies


def maxrss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # Linux: KiB


def hwm_gib() -> float:
    """The peak RSS of this process's own memory map (/proc VmHWM): ru_maxrss without the parent's."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) * 1024 / GIB


# ---- memory: peak RSS of one update, a fresh process per configuration ------------------


def memory_run(vocab: int, scored: int, plain: bool, samples: int, response: int, prompt: int, max_id: int) -> dict:
    """In this process: one Learner.update; the peak RSS after imports, after setup and after the update."""
    import math

    import torch

    from algos.config import LearnerConfig
    from algos.learner import Learner

    floor = maxrss_gib()
    model = profile_model(vocab)
    rows = make_samples(samples, response, prompt, max_id, -math.log(scored))
    cfg = LearnerConfig(rollout_is="off", autocast="off", num_minibatches=1, micro_batch_size=samples)
    learner = Learner(model, cfg, pad_id=0, vocab=scored)
    setup = maxrss_gib()
    with plain_head() if plain else contextlib.nullcontext():
        stats = learner.update(rows)
    params = sum(p.numel() for p in model.parameters())
    return {"vocab": vocab, "plain": plain, "floor_gib": floor, "setup_gib": setup, "peak_gib": maxrss_gib(),
            "vm_hwm_gib": hwm_gib(),
            "model_state_gib": 16 * params / GIB, "loss": stats["train/loss"], "entropy": stats["train/entropy"],
            "torch_threads": torch.get_num_threads()}  # fmt: skip


def bare(cmd: list[str]) -> list[str]:
    """`cmd` started through a bare Python launcher, so that its ru_maxrss is its own.

    A process's ru_maxrss starts at its parent's peak (exec records the old memory map's high-water
    mark): the launcher inherits this process's peak, `cmd` only the launcher's few MB."""
    launcher = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"
    return [sys.executable, "-c", launcher, *cmd]


def child(function: str, kwargs: dict) -> str:
    """`function(**kwargs)` of this module in a fresh Python process (`bare`); its result as JSON."""
    code = (f"import json, sys; from benchmarks.bench_vocab import {function}; "
            f"print(json.dumps({function}(**json.loads(sys.argv[1]))))")  # fmt: skip
    done = subprocess.run(bare([sys.executable, "-c", code, json.dumps(kwargs)]), cwd=ROOT, capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"{function}({kwargs}) failed in its process:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def memory(vocab: int, scored: int, small: int, samples: int, response: int, prompt: int) -> list[dict]:
    """memory_run for (small, chunked), (vocab, chunked), (vocab, plain), each in its own child process."""
    out = []
    for v, s, plain in ((small, small, False), (vocab, scored, False), (vocab, scored, True)):
        spec = dict(vocab=v, scored=s, plain=plain, samples=samples, response=response, prompt=prompt, max_id=small)
        out.append(json.loads(child("memory_run", spec)))
    return out


def print_memory(rows: list[dict], samples: int, response: int, prompt: int) -> dict:
    print(f"\n== memory: one Learner.update, {samples} samples x {response} response tokens, prompts ~{prompt} "
          "tokens; peak RSS of a fresh process per row")  # fmt: skip
    print("| configuration | peak RSS (GiB) | after imports | peak above imports | model state | above imports "
          "minus model state | train/loss |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        above = r["peak_gib"] - r["floor_gib"]
        name = f"V = {r['vocab']:,}, {'plain logits' if r['plain'] else 'chunked head'}"
        print(f"| {name} | {r['peak_gib']:.3f} | {r['floor_gib']:.3f} | {above:.3f} | {r['model_state_gib']:.3f} | "
              f"{above - r['model_state_gib']:.3f} | {r['loss']:.6f} |")  # fmt: skip
    small, big, plain = rows
    ratio = big["peak_gib"] / small["peak_gib"]
    out = {"ratio_peak": ratio, "ratio_plain_over_chunked": plain["peak_gib"] / big["peak_gib"],
           "loss_diff_plain_chunked": abs(plain["loss"] - big["loss"])}  # fmt: skip
    print(f"peak V = {big['vocab']:,} / V = {small['vocab']:,} (chunked): {ratio:.2f}x (target <= 1.5: "
          f"{'met' if ratio <= 1.5 else 'NOT met'}); plain / chunked at V = {big['vocab']:,}: "
          f"{out['ratio_plain_over_chunked']:.2f}x; |loss plain - chunked| = {out['loss_diff_plain_chunked']:.1e}")  # fmt: skip
    return out


# ---- time: the update against a pure replay of its matmuls -----------------------------


def fwd_bwd(model, batch: dict, scored: int) -> tuple[float, object]:
    """One forward + backward of response_logprobs + the learner's PPO loss (dapo): (loss, logp)."""
    from algos.learner import aggregate, ppo_token_loss
    from algos.logprobs import response_logprobs

    logp, _ = response_logprobs(model, batch, 1.0, True, False, scored)  # the learner's call (entropy, no grad)
    tok_loss, _ = ppo_token_loss(logp, batch["old"], batch["adv"], 0.2, 0.28, mask=batch["mask"])
    mask = batch["mask"]
    loss = aggregate(tok_loss * batch["w"], mask, "dapo", len(mask), int(mask.sum()), mask.shape[1])
    loss.backward()
    return float(loss.detach()), logp.detach()


def replay(model, batch: dict, scored: int, g, grad_w, recompute: bool = True, head: bool = True) -> None:
    """The body forward + backward plus only the head matmuls of algos/lm_head.py, chunk by chunk:
    h @ W.T; [h @ W.T again]; g @ W; grad_W += g.T @ h, with g [step, V] random (no softmax, gather)."""
    import torch

    from algos import lm_head

    ids, attn = batch["ids"], batch["attn"]
    resp, width = batch["targets"].shape[1], ids.shape[1]
    keep = torch.arange(width - resp - 1, width - 1)
    hidden = model.model(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0))
    h = hidden.last_hidden_state[:, keep].reshape(-1, hidden.last_hidden_state.shape[-1])  # [N, H]
    w = lm_head.output_layer(model).weight.detach()[:scored]  # [V, H]
    step = max(1, lm_head.CHUNK_ELEMENTS // scored)
    grad_h = torch.zeros_like(h)
    with torch.no_grad():
        x = h.detach()
        if head:
            for s in range(0, len(x), step):
                x[s : s + step] @ w.T  # forward: the chunk's logits
            for s in range(0, len(x), step):
                c, gc = x[s : s + step], g[: len(x[s : s + step])]
                if recompute:
                    c @ w.T
                grad_h[s : s + step] = gc @ w
                grad_w[:scored].addmm_(gc.T, c)
    h.backward(grad_h)


def time_update(vocab: int, scored: int, samples: int, response: int, prompt: int, max_id: int, repeats: int,
                hidden: int = 0) -> dict:  # fmt: skip
    """Median seconds of each variant on one batch, interleaved; and chunked vs plain agreement."""
    import math

    import torch

    from algos import lm_head
    from algos.config import LearnerConfig
    from algos.learner import Learner, clip_grad_norm
    from algos.logprobs import collate

    model = profile_model(vocab, hidden=hidden)
    rows = make_samples(samples, response, prompt, max_id, -math.log(scored))
    batch = collate(rows, 0, "cpu")
    weight = model.get_output_embeddings().weight
    model.zero_grad(set_to_none=True)  # agreement first, before any optimizer step moves the weights
    loss_c, logp_c = fwd_bwd(model, batch, scored)
    grad_c = weight.grad.clone()
    model.zero_grad(set_to_none=True)
    with plain_head():
        loss_p, logp_p = fwd_bwd(model, batch, scored)
    grad_p = weight.grad.clone()
    agree = {"loss_chunked": loss_c, "loss_plain": loss_p, "logp_max_abs_diff": float((logp_c - logp_p).abs().max()),
             "grad_max_rel_diff": float((grad_c - grad_p).abs().max() / grad_p.abs().max())}  # fmt: skip
    step = max(1, lm_head.CHUNK_ELEMENTS // scored)
    g = torch.randn(step, scored) * 1e-4
    grad_w = torch.zeros_like(weight)
    learner = Learner(model, LearnerConfig(rollout_is="off", autocast="off", num_minibatches=1, micro_batch_size=samples), pad_id=0, vocab=scored)

    def plain() -> None:
        with plain_head():
            fwd_bwd(model, batch, scored)

    def optimizer() -> None:
        clip_grad_norm(model, 1.0)
        learner.optimizer.step()

    variants = {  # name: (function, zero the gradients first)
        "chunked": (lambda: fwd_bwd(model, batch, scored), True),
        "optimizer": (optimizer, False),  # on the gradients the chunked pass just left
        "plain": (plain, True),
        "replay4": (lambda: replay(model, batch, scored, g, grad_w), True),
        "replay3": (lambda: replay(model, batch, scored, g, grad_w, recompute=False), True),
        "body": (lambda: replay(model, batch, scored, g, grad_w, head=False), True),
        "update": (lambda: learner.update(rows), False),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(repeats + 1):  # round 0 is the warm-up
        for name, (fn, zero) in variants.items():
            if zero:
                model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            fn()
            if r:
                times[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    paired = [c / r for c, r in zip(times["chunked"], times["replay4"])]  # each round's own ratio
    return {"median_s": med, "times_s": times, "paired_chunked_over_replay4": paired, "agreement": agree,
            "tokens": samples * response, "chunk": step, "threads": torch.get_num_threads(),
            "hidden": model.config.hidden_size}  # fmt: skip


def print_time(t: dict, vocab: int, repeats: int) -> dict:
    m = t["median_s"]
    print(f"\n== time at V = {vocab:,}, hidden {t['hidden']}: {t['tokens']} response tokens, median of {repeats} after a warm-up, "
          f"head chunks of {t['chunk']} tokens, {t['threads']} torch threads")  # fmt: skip
    print("| | s | / pure replay (4 matmuls) |")
    print("|---|---|---|")
    rows = [("fwd + bwd, chunked head (response_logprobs + PPO loss)", m["chunked"]),
            ("fwd + bwd, plain logits", m["plain"]),
            ("pure replay: body fwd + bwd + 4 head matmuls per chunk", m["replay4"]),
            ("pure replay: body fwd + bwd + 3 head matmuls (no recompute)", m["replay3"]),
            ("pure replay: body fwd + bwd only", m["body"]),
            ("full Learner.update (chunked)", m["update"]),
            ("pure optimizer step (grad clip + AdamW)", m["optimizer"])]  # fmt: skip
    for name, s in rows:
        print(f"| {name} | {s:.3f} | {s / m['replay4']:.3f} |")
    out = {"chunked_over_replay4": m["chunked"] / m["replay4"], "chunked_over_replay3": m["chunked"] / m["replay3"],
           "plain_over_chunked": m["plain"] / m["chunked"], "replay4_over_replay3": m["replay4"] / m["replay3"],
           "head_share_of_replay4": 1 - m["body"] / m["replay4"],
           "update_over_replay4_plus_optimizer": m["update"] / (m["replay4"] + m["optimizer"])}  # fmt: skip
    ratio = out["chunked_over_replay4"]
    print(f"chunked fwd+bwd / its pure replay: {ratio:.3f}x (target <= 1.2: {'met' if ratio <= 1.2 else 'NOT met'}); "
          f"/ 3-matmul replay {out['chunked_over_replay3']:.3f}x; recompute replay / 3-matmul replay "
          f"{out['replay4_over_replay3']:.3f}x; plain / chunked {out['plain_over_chunked']:.3f}x; head share of "
          f"the replay {out['head_share_of_replay4']:.1%}; full update / (replay + optimizer step) "
          f"{out['update_over_replay4_plus_optimizer']:.3f}x")  # fmt: skip
    paired = t["paired_chunked_over_replay4"]
    print(f"per round, chunked / replay: median {statistics.median(paired):.3f}, "
          f"range {min(paired):.3f}-{max(paired):.3f}")  # fmt: skip
    a = t["agreement"]
    print(f"chunked vs plain: loss {a['loss_chunked']:.7f} / {a['loss_plain']:.7f}, max |logp diff| "
          f"{a['logp_max_abs_diff']:.1e}, head-weight gradient max rel diff {a['grad_max_rel_diff']:.1e}")  # fmt: skip
    return out


# ---- sampling: sample() as a share of a decode step ------------------------------------

MODES = {"T=1 (default)": (1.0, 1.0), "greedy": (0.0, 1.0), "top-p 0.9": (1.0, 0.9)}


def keydoor_prompts(tokenizer, backend, n: int) -> list[list[int]]:
    """The agent's prompts (memory 1) for the first view of KeyDoor-v0 reset with seeds 0..n-1."""
    import gymnasium as gym

    import envs  # noqa: F401  (registers the ids)
    from agents.agent import LLMAgent, View
    from agents.generation import Sampling
    from agents.prompt import PromptBuilder

    agent = LLMAgent(tokenizer, backend, PromptBuilder(memory=1), Sampling())
    env = gym.make("KeyDoor-v0")
    out = []
    for i in range(n):
        obs, info = env.reset(seed=i)
        out.append(agent.prompt_ids(View(info["task"], (), obs, tuple(info["admissible_commands"]))))
    env.close()
    return out


def time_sampling(batch_sizes: list[int], steps: int, warmup: int = 3) -> list[dict]:
    """Median ms of backend.decode and of sample() on its logits, per batch size and sampling mode."""
    import torch

    from agents.backend import HFBackend, sample
    from agents.generation import Sampling
    from agents.model import load_model, load_tokenizer, resolve_model
    from agents.profiles import EOS_IDS, QWEN25

    path = resolve_model(QWEN25)
    model, tokenizer = load_model(path, "cpu", torch.float32).eval(), load_tokenizer(path)
    backend = HFBackend(model, EOS_IDS, tokenizer.pad_token_id, max(batch_sizes), 0, "off", len(tokenizer))
    prompts = keydoor_prompts(tokenizer, backend, max(batch_sizes))
    out = []
    with torch.no_grad():
        for b in batch_sizes:
            for mode, (temperature, top_p) in MODES.items():
                sampling = Sampling(temperature, top_p)
                logits, cache, mask, pos = backend.prefill(prompts[:b])
                token, _ = sample(logits, sampling, backend.generator)
                dec, smp = [], []
                for n in range(warmup + steps):
                    start = time.perf_counter()
                    logits, cache, mask, pos = backend.decode(token, cache, mask, pos)
                    mid = time.perf_counter()
                    token, _ = sample(logits, sampling, backend.generator)  # fresh logits: no clone needed
                    end = time.perf_counter()
                    if n >= warmup:
                        dec.append(mid - start)
                        smp.append(end - mid)
                d, s = statistics.median(dec), statistics.median(smp)
                out.append({"batch": b, "mode": mode, "decode_ms": 1e3 * d, "sample_ms": 1e3 * s, "share": s / (d + s),
                            "prompt_tokens_mean": sum(map(len, prompts[:b])) / b})  # fmt: skip
    return out


def print_sampling(rows: list[dict], steps: int) -> dict:
    print(f"\n== sampling at V = 151,665 tokens (151,936 rows): HF backend, KeyDoor-v0 prompts, median of {steps} "
          "decode steps")  # fmt: skip
    print("| batch | mode | decode (ms) | sample (ms) | sample / (decode + sample) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['mode']} | {r['decode_ms']:.2f} | {r['sample_ms']:.2f} | {r['share']:.1%} |")
    worst = max(rows, key=lambda r: r["share"])
    default = [r for r in rows if r["mode"] == "T=1 (default)"]
    met = all(r["share"] <= 0.2 for r in default)
    shares = ", ".join(f"batch {r['batch']}: {r['share']:.1%}" for r in default)
    print(f"default sampling at most 20 % of a step: {'met' if met else 'NOT met'} ({shares}); largest share: "
          f"{worst['mode']} at batch {worst['batch']}, {worst['share']:.1%}")  # fmt: skip
    return {"default_met": met, "worst": worst}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_vocab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--vocab", type=int, default=None, help="memory, time: head rows of the large model (the profile's)")
    p.add_argument("--small-vocab", type=int, default=1028, help="memory: head rows of the small model (ids < it)")
    p.add_argument("--samples", type=int, default=64, help="memory: samples in the (one) micro-batch")
    p.add_argument("--time-samples", type=int, default=64, help="time: samples in the batch")
    p.add_argument("--hidden", type=int, default=0, help="time: another body width than the profile's 64")
    p.add_argument("--response-tokens", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=100, help="prompt length, +- 10 %%")
    p.add_argument("--repeats", type=int, default=5, help="time: timed rounds after one warm-up round")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 8], help="sampling: decode batch sizes")
    p.add_argument("--decode-steps", type=int, default=10, help="sampling: timed decode steps per row")
    p.add_argument("--threads", type=int, default=1,
                   help="time, sampling: torch threads (0: torch's default). On a shared 2-core machine a "
                        "second thread waits for a time slice at every parallel op")  # fmt: skip
    p.add_argument("--json", type=Path, default=Path("runs/bench_vocab/summary.json"))
    args = p.parse_args(argv)
    from agents.model import load_tokenizer, resolve_model
    from agents.profiles import MODEL_VOCAB, QWEN25

    vocab = args.vocab or MODEL_VOCAB
    # The learner's vocab = len(tokenizer): at the profile's size its 271 padded rows are not scored.
    scored = len(load_tokenizer(resolve_model(QWEN25))) if vocab == MODEL_VOCAB else vocab
    sizes = (args.samples, args.response_tokens, args.prompt_tokens)
    summary: dict = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                     "vocab": vocab, "scored": scored}  # fmt: skip
    start, load = time.perf_counter(), os.getloadavg()
    if "memory" in args.parts:
        rows = memory(vocab, scored, args.small_vocab, *sizes)
        summary["memory"] = {"rows": rows, "parent_peak_gib": maxrss_gib(), **print_memory(rows, *sizes)}
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if "time" in args.parts:
        t = time_update(vocab, scored, args.time_samples, *sizes[1:], args.small_vocab, args.repeats, args.hidden)
        summary["time"] = {**t, **print_time(t, vocab, args.repeats)}
    if "sampling" in args.parts:
        rows = time_sampling(args.batch_sizes, args.decode_steps)
        summary["sampling"] = {"rows": rows, **print_sampling(rows, args.decode_steps)}
    summary["seconds"], summary["load_average"] = time.perf_counter() - start, [load, os.getloadavg()]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\n{summary['seconds']:.0f} s; load average (1, 5, 15 min) at the start {load[0]:.1f} / {load[1]:.1f} / "
          f"{load[2]:.1f}, at the end {os.getloadavg()[0]:.1f} (the machine has {os.cpu_count()} cores); "
          f"written: {args.json}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
