"""A real model on this CPU, against this CPU's matmul limit measured in the same run.

    python -m benchmarks.bench_cpu                              # SmolLM2-135M-Instruct, every part
    python -m benchmarks.bench_cpu --parts learner decode --model tiny-qwen2.5
    python -m benchmarks.bench_cpu --parts iteration --iterations 4   # the SmolLM2 preset's own iterations
    python -m benchmarks.bench_cpu --parts iteration --iteration-presets before preset   # today's preset, the old one

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
generate The HF backend's `generate` over real window prompts (the first --generate-prompts recorded in
         --transcripts, a run's transcripts.jsonl), in generation batches of 8, up to 16 new tokens, the
         same seed for every arm: whole prompts through the model (`share_opening=False`), the shared
         opening run once (the default), and a LoRA model of rank 16 sampled through its adapter, against
         the plain copy the trainer samples from instead (its weights refreshed with the adapter merged
         in at each sync, `sync_s`). The arms alternate, --repeats times each; not in the default parts.
iteration The trainer itself: `python -m algos.train --model M` (its named preset) for --iterations RL
         iterations, once with bf16 autocast and once in float32 (`--autocast off`, what a laptop without
         bf16 units runs), each in its own process (its peak RSS its own), no held-out evaluation.
         Per iteration: seconds per env step, split into generation, the update (forward + backward,
         the old-logprob recompute, the optimizer) and the rest; learner tokens (prompt + reply, what
         the learner reads) and trained tokens per env step; peak RSS so far. --iteration-args passes
         more trainer flags (e.g. "--sft-steps 10"). --iteration-presets before preset runs each
         precision under SmolLM2's preset as it stood on 2026-12-06 (benchmarks/smollm2-135m-before.yaml)
         and under today's (configs/smollm2-135m.yaml), side by side in one run; with a warmed-up
         checkpoint as --model and "--sft-steps 0", every arm starts from the same weights. Not in the
         default parts: it trains for minutes.

Prints the tables and writes them to --out (default runs/bench_cpu/summary.json). Every timing is
the median of --repeats after one untimed warm-up.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

from algos.presets import model_preset

PARTS = ("matmul", "learner", "decode", "generate", "iteration")
DEFAULT_PARTS = ("matmul", "learner", "decode")
ITERATION_PRECISIONS = {"bf16": ["--autocast", "bf16"], "float32": ["--autocast", "off"]}
# --iteration-presets: SmolLM2's preset today, and as it stood on 2026-12-06 (kept to measure changes against it), each
# passed as --config (so that --model may be a warmed-up checkpoint, which brings no preset of its own)
ITERATION_PRESETS = {"preset": model_preset("smollm2-135m-instruct"),
                     "before": Path(__file__).parent / "smollm2-135m-before.yaml"}  # fmt: skip
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


def generate_part(path: str, transcripts: Path, count: int, repeats: int) -> dict:
    """Seconds per `generate` call over the same recorded prompts, per arm (median of `repeats`, alternated)."""
    import copy

    import torch

    from agents.backend import HFBackend
    from agents.generation import Sampling
    from agents.model import add_lora, load_model, load_tokenizer

    model, tokenizer = load_model(path, "cpu", torch.float32), load_tokenizer(path)
    texts = [step["prompt"] for line in transcripts.read_text().splitlines() for step in json.loads(line)["steps"]]
    prompts = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts[:count]]
    lora = add_lora(copy.deepcopy(model), 16, 32.0, 0.0, "all-linear")
    sampling, eos, pad = Sampling(temperature=1.0, max_new_tokens=16), [tokenizer.eos_token_id], tokenizer.pad_token_id
    arms = {"whole prompts": (model, False), "shared opening": (model, True), "LoRA adapter": (lora, True),
            "LoRA merged copy": (model, True)}  # fmt: skip
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    tokens: dict[str, int] = {}
    sync = []
    for _ in range(repeats):
        for arm, (sampler, share) in arms.items():
            backend = HFBackend(sampler, eos, pad, batch_size=8, seed=0, share_opening=share)
            if arm == "LoRA merged copy":
                backend.model = copy.deepcopy(model)  # the trainer's plain sampling copy (algos/policy.py)
                start = time.perf_counter()
                backend.sync(lora)
                sync.append(time.perf_counter() - start)
            start = time.perf_counter()
            ids, _ = backend.generate(prompts, sampling)
            times[arm].append(time.perf_counter() - start)
            tokens[arm] = sum(map(len, ids))
    base = statistics.median(times["shared opening"])
    rows = [{"arm": arm, "s": statistics.median(t), "vs_shared": statistics.median(t) / base, "new_tokens": tokens[arm]}
            for arm, t in times.items()]  # fmt: skip
    return {"prompts": len(prompts), "prompt_tokens": sum(map(len, prompts)) / max(len(prompts), 1),
            "sync_s": statistics.median(sync), "rows": rows}  # fmt: skip


def iteration_part(model: str, iterations: int, precisions: list[str], out: Path, extra: list[str],
                   presets: list[str] | None = None) -> dict:  # fmt: skip
    """The trainer's own iterations per preset and precision, each run in a fresh process (benchmarks.bench_vocab
    `bare`): {"rows": one per iteration, "runs": per arm its command, wall seconds and summary}. `presets`:
    names of ITERATION_PRESETS, each run as `--config` (None: the model's own preset, as `--model` brings it)."""
    import subprocess

    from algos.run_dir import read_metrics
    from benchmarks.bench_vocab import ROOT, bare

    rows, runs = [], []
    for preset in presets or [""]:
        for precision in precisions:
            arm = f"{preset}-{precision}" if preset else precision
            run = (out / f"iteration-{arm}").resolve()
            config = ["--config", str(ITERATION_PRESETS[preset])] if preset else []
            cmd = [sys.executable, "-m", "algos.train", "--model", model, *config, "--iterations", str(iterations),
                   "--eval-episodes", "0", "--save-every", "0", "--output-dir", str(run), "--overwrite",
                   *ITERATION_PRECISIONS[precision], *extra]  # fmt: skip
            start = time.perf_counter()
            done = subprocess.run(bare(cmd), cwd=ROOT, capture_output=True, text=True)
            wall = time.perf_counter() - start
            if done.returncode:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
            mine = [iteration_row(precision, r, preset) for r in read_metrics(run) if "rollout/steps" in r]
            rows += mine
            runs.append({"preset": preset, "precision": precision, "command": " ".join(cmd[1:]), "wall_s": wall,
                         **iteration_summary(mine)})  # fmt: skip
    return {"model": model, "iterations": iterations, "rows": rows, "runs": runs}


def iteration_row(precision: str, m: dict, preset: str = "") -> dict:
    """One iteration's metrics row as costs per env step."""
    steps = max(m["rollout/steps"], 1.0)
    generate, update, total = m.get("time/generate_s", 0.0), m.get("time/train_s", 0.0), m["time/iteration_s"]
    return {"preset": preset, "precision": precision, "iteration": m["iteration"], "env_steps": int(m["rollout/steps"]),
            "s_per_step": total / steps, "generate_s_per_step": generate / steps, "update_s_per_step": update / steps,
            "forward_backward_s_per_step": m.get("time/forward_backward_s", 0.0) / steps,
            "recompute_s_per_step": m.get("time/recompute_s", 0.0) / steps,
            "optimizer_s_per_step": m.get("time/optimizer_s", 0.0) / steps,
            "rest_s_per_step": (total - generate - update) / steps,
            "learner_tokens_per_step": m.get("train/forward_tokens", 0.0) / steps,
            "trained_tokens_per_step": m.get("train/backward_tokens", 0.0) / steps,
            "peak_rss_gib": m.get("memory/peak_rss_gib", 0.0)}  # fmt: skip


def iteration_summary(rows: list[dict]) -> dict:
    """Seconds per env step over all the iterations but the first (its caches and allocator are still
    warming up), and the peak RSS's growth from iteration 2 to the last, in percent."""
    later = rows[1:] or rows
    steps = sum(r["env_steps"] for r in later)
    seconds = sum(r["s_per_step"] * r["env_steps"] for r in later)
    growth = 100 * (later[-1]["peak_rss_gib"] / later[0]["peak_rss_gib"] - 1) if later and later[0]["peak_rss_gib"] else 0.0
    return {"s_per_step": seconds / max(steps, 1), "peak_rss_gib": max((r["peak_rss_gib"] for r in rows), default=0.0),
            "rss_growth_pct": growth}  # fmt: skip


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
    if "generate" in result:
        g = result["generate"]
        print(f"\ngenerate over {g['prompts']} recorded prompts of {g['prompt_tokens']:.0f} tokens (batches of 8, "
              f"16 new tokens at most); a sync into the plain copy takes {g['sync_s']:.3f} s\n| arm | s | "
              "vs shared opening | new tokens |\n|---|---|---|---|")  # fmt: skip
        for row in g["rows"]:
            print(f"| {row['arm']} | {row['s']:.2f} | {row['vs_shared']:.2f} | {row['new_tokens']} |")
    if "iteration" in result:
        r = result["iteration"]
        print(f"\ntrainer iterations of {r['model']} (bf16 units on this CPU: {result['cpu_has_bf16']}), seconds per "
              "env step\n| preset | precision | iteration | env steps | s/step | generate | update (fwd+bwd, "
              "recompute, optimizer) | rest | learner tok/step | trained tok/step | peak RSS GiB |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
        for x in r["rows"]:
            print(f"| {x['preset'] or '-'} | {x['precision']} | {x['iteration']} | {x['env_steps']} | "
                  f"{x['s_per_step']:.3f} | "
                  f"{x['generate_s_per_step']:.3f} | {x['update_s_per_step']:.3f} ({x['forward_backward_s_per_step']:.3f}, "
                  f"{x['recompute_s_per_step']:.3f}, {x['optimizer_s_per_step']:.3f}) | {x['rest_s_per_step']:.3f} | "
                  f"{x['learner_tokens_per_step']:.0f} | {x['trained_tokens_per_step']:.1f} | {x['peak_rss_gib']:.2f} |")  # fmt: skip
        for x in r["runs"]:
            print(f"{x['preset'] or 'preset'} {x['precision']}: {x['s_per_step']:.3f} s per env step after the "
                  "first iteration, peak RSS "
                  f"{x['peak_rss_gib']:.2f} GiB ({x['rss_growth_pct']:+.1f} % from iteration 2 to the last), "
                  f"whole command {x['wall_s']:.0f} s")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(DEFAULT_PARTS))
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--batch", type=int, default=8, help="learner: sequences")
    p.add_argument("--tokens", type=int, default=150, help="learner: tokens per sequence")
    p.add_argument("--decode-batches", type=int, nargs="+", default=[16, 64])
    p.add_argument("--prompt-tokens", type=int, default=150, help="decode: prompt length before the timed step")
    p.add_argument("--decode-backends", nargs="+", choices=("hf", "vllm"), default=["hf", "vllm"])
    p.add_argument("--vllm-dtype", choices=("float32", "bfloat16"), default="bfloat16",
                   help="decode: the vLLM engine's dtype (one engine per process)")
    p.add_argument("--no-compile", action="store_true", help="learner: leave out the torch.compile row")
    p.add_argument("--iterations", type=int, default=3, help="iteration: RL iterations per precision")
    p.add_argument("--iteration-precisions", nargs="+", choices=tuple(ITERATION_PRECISIONS),
                   default=list(ITERATION_PRECISIONS))  # fmt: skip
    p.add_argument("--iteration-presets", nargs="+", choices=tuple(ITERATION_PRESETS), default=None,
                   help="iteration: presets to compare, each at every precision (default: the model's own)")
    p.add_argument("--iteration-args", default="", help='iteration: more trainer flags, e.g. "--sft-steps 10"')
    p.add_argument("--transcripts", type=Path, default=None, help="generate: a run's transcripts.jsonl")
    p.add_argument("--generate-prompts", type=int, default=32, help="generate: how many recorded prompts")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("runs/bench_cpu"))
    args = p.parse_args(argv)
    from agents.model import cpu_has_bf16, resolve_model, source_problem

    if problem := source_problem(args.model):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    path = resolve_model(args.model)
    result: dict = {"model": args.model, "cpu_has_bf16": cpu_has_bf16()}
    gflops = matmul_gflops(args.repeats) if {"matmul", "learner"} & set(args.parts) else {}
    if "matmul" in args.parts:
        result["matmul"] = gflops
    if "learner" in args.parts:
        rows = learner_part(path, args.batch, args.tokens, args.repeats, gflops["bfloat16"], not args.no_compile)
        result["learner"] = {"batch": args.batch, "tokens": args.tokens, "rows": rows}
    if "decode" in args.parts:
        result["decode"] = {"prompt_tokens": args.prompt_tokens,
                            "rows": decode_part(path, args.decode_batches, args.prompt_tokens, args.repeats,
                                                args.decode_backends, args.vllm_dtype)}
    if "generate" in args.parts:
        if args.transcripts is None or not args.transcripts.is_file():
            print(f"error: --parts generate needs --transcripts, a run's transcripts.jsonl (got {args.transcripts})",
                  file=sys.stderr)  # fmt: skip
            return 2
        result["generate"] = generate_part(path, args.transcripts, args.generate_prompts, args.repeats)
    if "iteration" in args.parts:
        result["iteration"] = iteration_part(args.model, args.iterations, args.iteration_precisions, args.out,
                                             shlex.split(args.iteration_args), args.iteration_presets)  # fmt: skip
    print_tables(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
