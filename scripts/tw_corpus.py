"""Write agents/data/textworld_corpus.txt: TextWorld text for the tiny model's tokenizer.

The tiny default model's byte-level BPE is trained on text the agent reads and writes.
TextWorld text (room descriptions, objectives, commands) comes from TextWorld's generator,
which is an optional dependency, so a sample of it is generated once with this script and
committed: the tokenizer is then the same on every machine, with or without textworld.

    python -m scripts.tw_corpus            # needs textrl[textworld]; about a minute
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "agents" / "data" / "textworld_corpus.txt"
PLAN = [  # (env id, level, games, episodes per game)
    ("TextWorld-CoinCollector-v0", 3, 6, 2),
    ("TextWorld-CoinCollector-v0", 8, 6, 2),
    ("TextWorld-TreasureHunter-v0", 5, 6, 2),
    ("TextWorld-TreasureHunter-v0", 15, 4, 2),
    ("TextWorld-Cooking-v0", 2, 4, 2),
    ("TextWorld-Cooking-v0", 5, 3, 2),
    ("TextWorld-Simple-v0", 1, 2, 2),
]
MAX_BYTES = 400_000


def main() -> int:
    os.environ["TEXTRL_CACHE"] = tempfile.mkdtemp(prefix="textrl-corpus-")  # leaves the user's cache alone
    import gymnasium as gym

    import envs  # noqa: F401
    from agents.prompt import PromptBuilder
    from agents.tiny import corpus_steps

    rng = random.Random(0)
    builder = PromptBuilder(memory=1, template="textworld")
    seen, lines = set(), []
    for env_id, level, games, episodes in PLAN:
        env = gym.make(env_id, level=level, num_games=games, num_held_out=0)
        for g in range(games):
            for _ in range(episodes):
                for msgs, action in corpus_steps(env, g, builder, rng, max_steps=30):
                    for m in msgs:
                        for line in m["content"].split("\n"):
                            if line not in seen:
                                seen.add(line)
                                lines.append(line)
                    lines.append(f"<action>{action}</action>")
        env.close()
    text = "\n".join(lines)[:MAX_BYTES]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text + "\n")
    print(f"{len(text):,} characters, {text.count(chr(10)) + 1:,} lines -> {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
