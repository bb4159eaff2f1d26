"""Train with tool calls instead of action tags: KeyDoor's declared tools, end to end.

    python examples/tool_calls.py                          # tiny model, tools written into the prompt
    python examples/tool_calls.py --model tiny-qwen2.5     # Qwen2.5's chat template renders tools=
    python examples/tool_calls.py --action-format json     # bare {"name", "arguments"} replies

KeyDoor declares `go`, `take` and `unlock` in `metadata["tools"]` (envs/keydoor.py); the model
answers `<tool_call>{"name": "go", "arguments": {"direction": "north"}}</tool_call>` and the
parser maps the call to the command "go north" (docs/design.md, Action formats). The SFT warm-up
trains on the expert's commands written as calls, so a few iterations already show valid calls.
After the run, the transcript's first prompt shows how the tools reached the model, and the
parse statuses of the last iteration say how well it calls them. Flags after the script's own
defaults override them (any `python -m algos.train` flag).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere in the checkout

from algos.train import main  # noqa: E402

OUT = Path("/tmp/tool_calls_example")
DEFAULTS = ["--action-format", "tool_call", "--env", "KeyDoor-v0", "--iterations", "3", "--num-groups", "2",
            "--group-size", "4", "--eval-episodes", "4", "--sft-steps", "60", "--max-new-tokens", "48",
            "--output-dir", str(OUT), "--overwrite"]  # fmt: skip


def show(out: Path) -> None:
    records = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    first = records[0]["steps"][0]
    print("\n--- the first prompt ---\n" + first.get("prompt", ""))
    print("--- its reply ---\n" + first["response"], f"-> {first['action']!r} [{first['status']}]")
    statuses = Counter(s["status"] for s in records[-1]["steps"])
    print("--- parse statuses, last transcript ---", dict(statuses))


if __name__ == "__main__":
    argv = DEFAULTS + sys.argv[1:]
    code = main(argv)
    out = Path(argv[len(argv) - 1 - argv[::-1].index("--output-dir") + 1])
    if code == 0 and (out / "transcripts.jsonl").exists():
        show(out)
    sys.exit(code)
