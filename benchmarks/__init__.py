"""Benchmarks: the measurements behind docs/benchmarks.md (run from the repo root, `python -m benchmarks.bench_x`).

Not an installed package (pyproject.toml's packages.find leaves it out); the user tools stay in scripts/."""
