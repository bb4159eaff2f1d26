"""Peak memory per rank: the default model and a larger one, full / LoRA / checkpointing / DDP / FSDP.

    python -m benchmarks.bench_memory [--models tiny small] [--variants full lora ckpt ddp fsdp]
        [--iterations 1] [--out runs/bench_memory]

Every variant is a real short training run of `python -m algos.train` (through torchrun for the
2-rank variants) with the same rollout budget; the trainer writes each rank's peak resident
memory (and peak CUDA allocation on a GPU) to the run's memory.json, and this script prints
them side by side, next to the bytes of the model state a rank holds (weights, gradients, AdamW
moments) and a bare process that has only imported torch and transformers (the floor). Every child
starts through a bare launcher (benchmarks.bench_vocab `bare`): a child's peak RSS would otherwise
start at this process's own (a test runner's, or this one's after it loaded a large model).

`small` is a 26M-parameter Qwen2 model (hidden 512, 8 layers) built locally with the tiny
model's tokenizer, so nothing is downloaded; on a GPU pass `--models Qwen/Qwen2.5-1.5B-Instruct`
and `--device cuda`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.bench_vocab import bare

VARIANTS = {  # name: (processes, trainer flags)
    "full": (1, []),
    "lora": (1, ["--lora-rank", "16"]),
    "ckpt": (1, ["--gradient-checkpointing"]),
    "ddp": (2, ["--parallel", "ddp"]),
    "fsdp": (2, ["--parallel", "fsdp"]),
}
RUN = ["--num-groups", "2", "--group-size", "2", "--sft-steps", "5", "--sft-episodes", "8", "--eval-episodes", "0",
       "--max-new-tokens", "16", "--no-dynamic-sampling", "--transcript-every", "0"]  # fmt: skip


def small_model() -> str:
    """A larger locally built model (same tokenizer as tiny): 8 layers, hidden 512, head_dim 64."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agents.model import load_tokenizer, resolve_model
    from envs.base import cache_dir

    path = cache_dir() / "small-qwen2-bench"
    if not (path / "config.json").exists():
        tok = load_tokenizer(resolve_model("tiny"))
        config = Qwen2Config(vocab_size=len(tok), hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                             num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048,
                             tie_word_embeddings=False, bos_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)  # fmt: skip
        Qwen2ForCausalLM(config).save_pretrained(path)
        tok.save_pretrained(path)
    return str(path)


def floor_gib() -> float:
    """Peak RSS of a process that only imports torch and transformers."""
    code = ("import resource, torch, transformers; "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)")  # fmt: skip
    return float(subprocess.run(bare([sys.executable, "-c", code]), capture_output=True, text=True, check=True).stdout)


def model_state_gib(model: str, variant: str, ranks: int, lora_rank: int = 16) -> float:
    """Bytes of weights + gradients + AdamW moments one rank holds (fp32), from the parameter counts."""
    import torch

    from agents.model import add_lora, load_model

    net = load_model(model, "cpu", torch.float32)
    total = sum(p.numel() for p in net.parameters())
    if variant == "lora":
        net = add_lora(net, lora_rank, 2.0 * lora_rank, 0.0, "all-linear")
        trainable = sum(p.numel() for p in net.parameters() if p.requires_grad)
        return 4 * (total + 4 * trainable) / 2**30  # frozen weights + adapter, its gradient and 2 moments
    state = 4 * 4 * total  # weights, gradients, two moments
    if variant == "fsdp":  # sharded state + the full copy the HF backend samples from
        return (state / ranks + 4 * total) / 2**30
    return state / 2**30


def run(model: str, variant: str, iterations: int, out: Path, device: str) -> list[dict]:
    procs, flags = VARIANTS[variant]
    run_dir = out / f"{Path(model).name}-{variant}"
    if not (run_dir / "memory.json").exists():
        train = ["-m", "algos.train", "--model", model, "--device", device, "--iterations", str(iterations),
                 "--output-dir", str(run_dir), "--overwrite", *RUN, *flags]  # fmt: skip
        cmd = [sys.executable, *train]
        if procs > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs), *train]  # fmt: skip
        print("$", " ".join(cmd[1:]), file=sys.stderr)
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // procs))}
        subprocess.run(bare(cmd), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return json.loads((run_dir / "memory.json").read_text())["ranks"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["tiny", "small"])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default="runs/bench_memory")
    args = p.parse_args(argv)
    from agents.model import resolve_model

    out = Path(args.out)
    floor = floor_gib()
    print(f"floor (python + torch + transformers imported): {floor:.2f} GiB peak RSS\n")
    print("| model | variant | ranks | peak RSS per rank (GiB) | above floor | model state per rank (GiB) |")
    print("|---|---|---|---|---|---|")
    table = []
    for name in args.models:
        model = small_model() if name == "small" else resolve_model(name)
        for variant in args.variants:
            ranks = run(model, variant, args.iterations, out, args.device)
            rss = [r["peak_rss_gib"] for r in ranks]
            state = model_state_gib(model, variant, len(ranks))
            cuda = [r["cuda_peak_gib"] for r in ranks if "cuda_peak_gib" in r]
            row = dict(model=name, variant=variant, ranks=len(ranks), peak_rss_gib=rss, model_state_gib=state,
                       cuda_peak_gib=cuda)  # fmt: skip
            table.append(row)
            shown = " / ".join(f"{v:.2f}" for v in rss) + (f" (CUDA {' / '.join(f'{v:.2f}' for v in cuda)})" if cuda else "")  # fmt: skip
            above = " / ".join(f"{v - floor:.2f}" for v in rss)
            print(f"| {name} | {variant} | {len(ranks)} | {shown} | {above} | {state:.3f} |", flush=True)
    (out / "summary.json").write_text(json.dumps({"floor_gib": floor, "runs": table}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
