"""One prepared GPU measurement: Qwen2.5-1.5B-Instruct's exact config, random weights, vLLM.

    python -m scripts.gpu_check                                   # a GPU: 2 iterations on KeyDoor-v0
    python -m scripts.gpu_check --model tiny-qwen2.5 --device cpu --max-new-tokens 8   # the same on a CPU

`random-qwen2.5-1.5b` (agents/profiles.py) has the real model's config and tokenizer (151,936
head rows, tied embeddings, two EOS ids) and random weights, so nothing is downloaded. The script
trains it for 2 iterations with `--backend vllm` (a warm-up of a few SFT steps first, so the sync
check runs once before RL too), then reads the run's metrics.jsonl and prints, per iteration:
generation tokens/s (response tokens sampled / time/generate_s), the update (time/train_s), the
weight sync with its check (time/sync_s, sync/logprob_diff_max) and peak GPU memory
(memory/cuda_peak_gib). With random weights every response runs to --max-new-tokens, which makes
generation the worst case for its length. The numbers go to docs/backends.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m scripts.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="random-qwen2.5-1.5b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="float32", help="float32: the sync check holds to 1e-3")
    p.add_argument("--env", default="KeyDoor-v0")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--num-groups", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--output-dir", type=Path, default=Path("runs/gpu_check"))
    p.add_argument("--json", type=Path, default=Path("runs/gpu_check.json"))
    return p.parse_args(argv)


def summary(run: Path) -> list[dict]:
    """Per RL iteration: the measured numbers this script reports."""
    from algos.run_dir import read_metrics

    rows = []
    for r in read_metrics(run):
        if "train/loss" not in r:
            continue
        tokens = r["rollout/response_tokens"] * r["rollout/steps"]
        rows.append({
            "iteration": r["iteration"],
            "generated_tokens": tokens,
            "generation_tokens_per_s": tokens / max(r["time/generate_s"], 1e-9),
            "update_s": r["time/train_s"],
            "sync_s": r["time/sync_s"],
            "sync_logprob_diff_max": r.get("sync/logprob_diff_max"),
            "iteration_s": r["time/iteration_s"],
            "cuda_peak_gib": r.get("memory/cuda_peak_gib"),
            "peak_rss_gib": r.get("memory/peak_rss_gib"),
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    from algos.advantages import RETURN_PLACEMENT
    from algos.train import main as train

    a = parse_args(argv)
    flags = ["--model", a.model, "--device", a.device, "--dtype", a.dtype, "--backend", "vllm", "--env", a.env,
             "--iterations", str(a.iterations), "--num-groups", str(a.num_groups), "--group-size", str(a.group_size),
             "--max-new-tokens", str(a.max_new_tokens), "--sft-steps", "4", "--sft-episodes", "4", "--eval-episodes",
             "0", "--max-extra-groups", "0", "--lr", "1e-6", "--output-dir", str(a.output_dir), "--overwrite",
             # a random model refuses nearly every action: inside the returns the refusals still give its rows
             # different advantages, so the update and the sync this script measures do run
             *RETURN_PLACEMENT]  # fmt: skip
    if a.device.startswith("cuda"):
        flags += ["--vllm-gpu-memory-utilization", "0.3", "--micro-batch-size", "16"]
    else:
        flags += ["--vllm-kv-cache-gib", "0.25"]
    code = train(flags)
    if code:
        return code
    rows = summary(a.output_dir)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"model": a.model, "device": a.device, "dtype": a.dtype, "iterations": rows}, indent=1))
    print("| iteration | tokens | gen tokens/s | update s | sync s | sync max diff | GPU peak GiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['iteration']} | {r['generated_tokens']:.0f} | {r['generation_tokens_per_s']:.0f} | "
              f"{r['update_s']:.2f} | {r['sync_s']:.2f} | {r['sync_logprob_diff_max']} | {r['cuda_peak_gib']} |")  # fmt: skip
    return 0


if __name__ == "__main__":  # vLLM starts worker machinery: the guard is required
    sys.exit(main())
