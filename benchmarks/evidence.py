"""A study's evidence in a form git can hold: every run's config, metrics, held-out episodes and attempts
(wall time, machine) in one xz-compressed JSON file, runs.json.xz, with the sha256 of each run's newest
checkpoint and of its warm-up. `unpack` writes the runs back as folders that benchmarks.bench_learning
summarises like its own, so a study's tables and paired tests are remade from git alone:

    python -m benchmarks.bench_learning --envs smollm2 --seeds 0 1 2 3 4 --out runs/real-smollm2 \\
        --pack studies/real-smollm2          # runs.json.xz, summary.json, summary.md, curves.png
    python -m benchmarks.bench_learning --envs smollm2 --seeds 0 1 2 3 4 --out /tmp/again \\
        --unpack studies/real-smollm2 --summary    # the same summary from the committed runs
"""

from __future__ import annotations

import hashlib
import json
import lzma
from pathlib import Path

import yaml

from algos.run_dir import TRAINER_STATE, read_held_out, read_metrics

RUNS = "runs.json.xz"
ATTEMPTS = "attempts.jsonl"  # one row per job attempt on a run (benchmarks.bench_learning.run_jobs)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def newest_checkpoint(run: Path) -> Path | None:
    """The run's checkpoint of the highest iteration that is whole (its trainer_state.pt is written last)."""
    done = [c for c in (run / "checkpoints").glob("iter_*") if (c / TRAINER_STATE).is_file()]
    return max(done, key=lambda c: int(c.name.split("_")[1]), default=None)


def weights_hashes(folder: Path) -> dict[str, str]:
    """sha256 of each safetensors file in a model folder, by file name."""
    return {p.name: sha256(p) for p in sorted(folder.glob("*.safetensors"))}


def read_run(run: Path) -> dict:
    """What the pack keeps of one run folder."""
    attempts = run.parent / f"{run.name}.{ATTEMPTS}"
    ckpt = newest_checkpoint(run)
    return {
        "config": yaml.safe_load((run / "config.yaml").read_text()) if (run / "config.yaml").is_file() else None,
        "metrics": read_metrics(run),
        "held_out": [{"iteration": it, **row} for it, row in sorted(read_held_out(run).items())],
        "attempts": [json.loads(line) for line in attempts.read_text().splitlines()] if attempts.is_file() else [],
        "checkpoint": {"name": ckpt.name, "sha256": weights_hashes(ckpt)} if ckpt else None,
    }


def pack(out: Path, names: list[str], dest: Path) -> dict:
    """The runs `names` (<preset>/s<seed>/<algo> under `out`, those with metrics) and the warm-ups they start
    from (<preset>/s<seed>/warm: weights' sha256) into dest/runs.json.xz, added to the runs it holds (a run
    packed again replaces its earlier state), so a study packed one preset at a time loses nothing.
    Returns what it wrote."""
    old = read_pack(dest) if (dest / RUNS).is_file() else {"runs": {}, "warm_ups": {}}
    runs, warm_ups = old["runs"], old["warm_ups"]
    for name in names:
        run = out / name
        if (run / "metrics.jsonl").is_file():
            runs[name] = read_run(run)
            warm = run.parent / "warm"
            if (warm / TRAINER_STATE).is_file():
                warm_ups[str(warm.relative_to(out))] = weights_hashes(warm)
    data = {"runs": runs, "warm_ups": warm_ups}
    dest.mkdir(parents=True, exist_ok=True)
    with lzma.open(dest / RUNS, "wt") as f:
        json.dump(data, f, separators=(",", ":"))
    return data


def read_pack(src: Path) -> dict:
    with lzma.open(src / RUNS, "rt") as f:
        return json.load(f)


def unpack(src: Path, out: Path) -> list[str]:
    """The packed runs written back under `out` as run folders (config.yaml, metrics.jsonl, held_out.jsonl,
    attempts); a folder that is already there is left alone. Returns the runs written."""
    written = []
    for name, r in read_pack(src)["runs"].items():
        run = out / name
        if run.exists():
            continue
        run.mkdir(parents=True)
        if r["config"] is not None:
            (run / "config.yaml").write_text(yaml.safe_dump(r["config"], sort_keys=False))
        (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in r["metrics"]))
        if r["held_out"]:
            (run / "held_out.jsonl").write_text("".join(json.dumps(row) + "\n" for row in r["held_out"]))
        if r["attempts"]:
            attempts = run.parent / f"{run.name}.{ATTEMPTS}"
            attempts.write_text("".join(json.dumps(row) + "\n" for row in r["attempts"]))
        written.append(name)
    return written
