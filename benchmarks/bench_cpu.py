"""A real model on this CPU, against this CPU's matmul limit measured in the same run.

    python -m benchmarks.bench_cpu                              # SmolLM2-135M-Instruct, every part
    python -m benchmarks.bench_cpu --parts learner decode --model tiny-qwen2.5

matmul   GFLOP/s of a 2048x576 @ 576x1536 matmul (SmolLM2's MLP shape) in float32 and bfloat16.
learner  One forward + backward of --batch x --tokens tokens through the learner's own code path
         (`collate` + `response_logprobs`, every token a response token, so the LM head sees all of
         them) under each precision: float32, bf16 autocast over float32 weights (what `--autocast
         bf16` runs), and bfloat16 weights. Its matmul work is counted from the model's shapes
         (3x the forward's: the backward does two matmuls per forward one) and divided by the
         bf16 GFLOP/s measured above: the ratio is time over that pure-matmul time. One more row,
         bf16-autocast+compile, runs the autocast row with each decoder layer under `torch.compile`
         (the chunked head stays eager); its compile time is the `compile_s` field. The trainer does
         not compile: the row measures what torch's compiler would buy it (--no-compile leaves it out).
decode   One cached decode forward (the HF backend's `decode`, after a --prompt-tokens prefill) at
         batch 16 and 64, per precision, and the same through vLLM's CPU build when it is installed
         (a 16-token greedy generate at each batch size, per token).

Prints the tables and writes them to --out (default runs/bench_cpu/summary.json). Every timing is
the median of --repeats after one untimed warm-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

PARTS = ("matmul", "learner", "decode")
PRECISIONS = ("float32", "bf16-autocast", "bf16-weights")
COMPILED = "bf16-autocast+compile"  # the learner's autocast row with every decoder layer compiled


def median_time(fn, repeats: int) -> float:
    fn()  # allocator, kernels, caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_gflops(repeats: int) -> dict[str, float]:
    import torch

    out = {}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a, b = torch.randn(2048, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
        seconds = median_time(lambda a=a, b=b: [a @ b for _ in range(10)], repeats) / 10
        out[name] = 2 * 2048 * 576 * 1536 / seconds / 1e9
    return out


def forward_flops(config, batch: int, tokens: int) -> float:
    """Matmul FLOPs of one forward over batch x tokens (causal attention, every position through the head)."""
    d, layers, inter = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    per_token = layers * (d * heads * head_dim + 2 * d * kv * head_dim + heads * head_dim * d + 3 * d * inter)
    per_token += d * config.vocab_size  # the LM head
    attention = layers * 2 * heads * head_dim * tokens * (tokens + 1) / 2  # QK^T and AV, causal half
    return 2 * batch * (tokens * per_token + attention)


def load(path: str, precision: str):
    import torch

    from agents.model import load_model

    dtype = torch.bfloat16 if precision == "bf16-weights" else torch.float32
    return load_model(path, "cpu", dtype)


def precision_context(precision: str):
    """The learner's and the HF backend's own forward context (agents/model.py `autocast`) for a precision."""
    from agents.model import autocast

    return autocast("cpu", "bf16" if precision == "bf16-autocast" else "off")


def compile_layers(model) -> None:
    """Each decoder layer under torch.compile at fixed shapes. Dynamo keeps one cache entry per layer
    instance: under its default recompile limit (8) the layers past the eighth would run eager."""
    import torch

    layers = model.model.layers
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 2 * len(layers))
    for layer in layers:
        layer.compile(dynamic=False)


def learner_part(path: str, batch: int, tokens: int, repeats: int, gflops: float, with_compile: bool = True) -> list[dict]:
    import torch
    from transformers import AutoConfig

    from algos.logprobs import Sample, collate, response_logprobs

    flops = 3 * forward_flops(AutoConfig.from_pretrained(path), batch, tokens)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for variant in (*PRECISIONS, COMPILED) if with_compile else PRECISIONS:
        precision = "bf16-autocast" if variant == COMPILED else variant
        model = load(path, precision).train()
        vocab = model.config.vocab_size
        samples = [Sample([1], torch.randint(3, vocab, (tokens - 1,), generator=gen).tolist(), 1.0, [0.0] * (tokens - 1))
                   for _ in range(batch)]  # fmt: skip
        collated = collate(samples, 0, "cpu")

        def step(model=model, collated=collated, precision=precision):
            with precision_context(precision):
                logp, _ = response_logprobs(model, collated, 1.0)
            (-(logp * collated["mask"]).sum() / collated["mask"].sum()).backward()
            model.zero_grad(set_to_none=True)

        row = {"precision": variant}
        if variant == COMPILED:
            compile_layers(model)
            start = time.perf_counter()
            step()  # compiles the forward and the backward
            row["compile_s"] = time.perf_counter() - start
        seconds = median_time(step, repeats)
        pure = flops / (gflops * 1e9)
        rows.append({**row, "seconds": seconds, "ms_per_token": 1000 * seconds / (batch * tokens),
                     "pure_matmul_s": pure, "ratio": seconds / pure})  # fmt: skip
        del model
    return rows


def decode_part(path: str, batches: list[int], prompt_tokens: int, repeats: int, backends: list[str],
                vllm_dtype: str = "bfloat16") -> list[dict]:
    import torch

    from agents.backend import HFBackend

    rows = []
    gen = torch.Generator().manual_seed(0)
    for precision in PRECISIONS:
        model = load(path, precision).eval()
        for batch in batches:
            prompts = [torch.randint(3, model.config.vocab_size, (prompt_tokens,), generator=gen).tolist()
                       for _ in range(batch)]  # fmt: skip
            backend = HFBackend(model, [], 0, batch)
            token = torch.full((batch,), 5)
            with torch.no_grad(), precision_context(precision):
                _, cache, mask, pos = backend.prefill(prompts)
                times = []
                for _ in range(repeats + 1):
                    start = time.perf_counter()
                    _, cache, mask, pos = backend.decode(token, cache, mask, pos)
                    times.append(time.perf_counter() - start)
            rows.append({"backend": "hf", "precision": precision, "batch": batch,
                         "ms_per_step": 1000 * statistics.median(times[1:])})  # fmt: skip
        del model
    if "vllm" in backends:
        rows += vllm_decode(path, batches, prompt_tokens, vllm_dtype)
    return rows


def vllm_decode(path: str, batches: list[int], prompt_tokens: int, dtype: str) -> list[dict]:
    """ms per generated token-step of vLLM's engine: (time of 17 new tokens - time of 1) / 16. One engine per
    process: a second in-process engine finds vLLM's parallel state torn down by the first."""
    from agents.vllm_backend import vllm_available

    if not vllm_available():
        print("decode: vLLM is not installed; its rows are left out", file=sys.stderr)
        return []
    import os

    import torch

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    rows = []
    gen = torch.Generator().manual_seed(0)
    llm = LLM(model=path, dtype=dtype, enforce_eager=True, seed=0, max_model_len=prompt_tokens + 32,
              kv_cache_memory_bytes=1 << 30)  # fmt: skip
    for batch in batches:
        prompts = [TokensPrompt(prompt_token_ids=torch.randint(3, 49_000, (prompt_tokens,), generator=gen).tolist())
                   for _ in range(batch)]  # fmt: skip

        def run(n, prompts=prompts, llm=llm):
            llm.reset_prefix_cache()
            params = SamplingParams(max_tokens=n, min_tokens=n, temperature=0.0, ignore_eos=True)
            llm.generate(prompts, params, use_tqdm=False)

        one, many = median_time(lambda: run(1), 2), median_time(lambda: run(17), 2)
        rows.append({"backend": "vllm", "precision": dtype, "batch": batch, "ms_per_step": 1000 * (many - one) / 16})
    return rows


def print_tables(result: dict) -> None:
    if "matmul" in result:
        m = result["matmul"]
        print(f"\nmatmul 2048x576 @ 576x1536: float32 {m['float32']:.0f} GFLOP/s, bfloat16 {m['bfloat16']:.0f} GFLOP/s "
              f"({m['bfloat16'] / m['float32']:.2f}x)")  # fmt: skip
    if "learner" in result:
        r = result["learner"]
        print(f"\nlearner forward+backward, {r['batch']} x {r['tokens']} tokens (pure matmul at the bf16 rate: "
              f"{r['rows'][0]['pure_matmul_s']:.2f} s)\n| precision | s | ms/token | x pure matmul |\n|---|---|---|---|")
        for row in r["rows"]:
            compiled = f" (compile {row['compile_s']:.0f} s)" if "compile_s" in row else ""
            print(f"| {row['precision']}{compiled} | {row['seconds']:.2f} | {row['ms_per_token']:.2f} | "
                  f"{row['ratio']:.2f} |")  # fmt: skip
    if "decode" in result:
        print(f"\ndecode, one step after a {result['decode']['prompt_tokens']}-token prompt\n"
              "| backend | precision | batch | ms/step |\n|---|---|---|---|")
        for row in result["decode"]["rows"]:
            print(f"| {row['backend']} | {row['precision']} | {row['batch']} | {row['ms_per_step']:.0f} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--batch", type=int, default=8, help="learner: sequences")
    p.add_argument("--tokens", type=int, default=150, help="learner: tokens per sequence")
    p.add_argument("--decode-batches", type=int, nargs="+", default=[16, 64])
    p.add_argument("--prompt-tokens", type=int, default=150, help="decode: prompt length before the timed step")
    p.add_argument("--decode-backends", nargs="+", choices=("hf", "vllm"), default=["hf", "vllm"])
    p.add_argument("--vllm-dtype", choices=("float32", "bfloat16"), default="bfloat16",
                   help="decode: the vLLM engine's dtype (one engine per process)")
    p.add_argument("--no-compile", action="store_true", help="learner: leave out the torch.compile row")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("runs/bench_cpu"))
    args = p.parse_args(argv)
    from agents.model import cpu_has_bf16, resolve_model, source_problem

    if problem := source_problem(args.model):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    path = resolve_model(args.model)
    result: dict = {"model": args.model, "cpu_has_bf16": cpu_has_bf16()}
    gflops = matmul_gflops(args.repeats)
    if "matmul" in args.parts:
        result["matmul"] = gflops
    if "learner" in args.parts:
        rows = learner_part(path, args.batch, args.tokens, args.repeats, gflops["bfloat16"], not args.no_compile)
        result["learner"] = {"batch": args.batch, "tokens": args.tokens, "rows": rows}
    if "decode" in args.parts:
        result["decode"] = {"prompt_tokens": args.prompt_tokens,
                            "rows": decode_part(path, args.decode_batches, args.prompt_tokens, args.repeats,
                                                args.decode_backends, args.vllm_dtype)}
    print_tables(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
