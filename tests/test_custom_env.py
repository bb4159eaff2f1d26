"""docs/custom_envs.md, run exactly as written: a user's own env package (examples/guessnum)
listed, trained for 2 iterations and evaluated, with all info keys and with none of them."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the documented commands train and evaluate in subprocesses

ROOT = Path(__file__).resolve().parent.parent


def documented_commands() -> str:
    doc = (ROOT / "docs" / "custom_envs.md").read_text()
    block = re.search(r"<!-- tested: begin -->\n```bash\n(.*?)```\n<!-- tested: end -->", doc, re.DOTALL)
    assert block, "docs/custom_envs.md lost its tested block"
    return block.group(1)


def test_the_documented_commands_work(tmp_path):
    # A stand-in for the repository root (the doc runs from there) whose runs/ is temporary.
    for name in ("envs", "agents", "algos", "rewards", "scripts", "configs", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # `python` = this interpreter
    (bin_dir / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    script = "set -euo pipefail\n" + documented_commands()
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "GuessNumber-v0" in proc.stdout and "expert, state keys, admissible commands" in proc.stdout

    full = json.loads((tmp_path / "runs/guessnum/eval.json").read_text())
    assert full["env"] == "guessnum:GuessNumber-v0" and full["policies"]["expert"]["success_rate"] == 1.0
    assert 0.0 <= full["policies"]["model"]["success_rate"] <= 1.0 and "2" in full["policies"]["model"]["pass_at_k"]
    assert full["policies"]["random"]["episodes"] == 16

    bare = json.loads((tmp_path / "runs/guessnum-bare/eval.json").read_text())
    assert "skipped" in bare["policies"]["random"] and "skipped" in bare["policies"]["expert"]
    assert proc.stderr.count("gives no info['state_key']") == 2  # once per process: train, evaluate
    assert "gives no info['expert_action']: no SFT warm-up" in proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "runs/guessnum-bare/metrics.jsonl").read_text().splitlines()]
    assert not any("sft/loss" in r for r in rows)
    # the untrained model refuses every reply: no contrast in any group, so no update, said once
    assert [r["train/update_skipped"] for r in rows if "train/update_skipped" in r] == [1.0, 1.0]
    assert "note: no update: in every group the rollouts scored alike" in proc.stderr
