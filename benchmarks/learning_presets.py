"""What benchmarks.bench_learning runs: its presets (an env, a config, flags, an env-step budget and
an evaluation cadence), and the paired comparisons its summary reports. The costs measured for each
preset are in the comments beside it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from algos.advantages import RETURN_PLACEMENT

ALGOS = ("gigpo", "grpo")
SFT = "sft"  # the SFT-only control arm: the warm-up continued on expert demonstrations instead of RL
ARMS = (*ALGOS, SFT)


@dataclass(frozen=True)
class Preset:
    env: str
    config: str
    """A YAML preset of algos.train, relative to the repository root."""
    flags: tuple[str, ...]
    """More algos.train flags, for the warm-up and both algorithms."""
    budget: int
    """Env steps per RL run (--max-env-steps)."""
    eval_every: int
    """Held-out evaluation every N iterations (and after warm-up and at the end)."""
    eval_episodes: int
    iterations: int = 0
    """With it, a run also ends after this many iterations (--iterations); 0: the budget alone ends it."""
    sft_steps: int = 90
    """The warm-up's supervised steps (the trainer's default from a fresh model)."""
    algos: tuple[str, ...] = ALGOS
    """The RL runs per seed, all from the same warm-up; only --algo differs."""
    warm_from: str = ""
    """Another preset's key whose warm-ups this one starts from (same env and SFT settings), so that
    two presets compare RL settings from the very same weights."""
    control_steps: int = 0
    """The SFT steps that the `sft` arm adds to the warm-up: a run of sft_steps + control_steps warm-up steps and
    no RL (`algos.train --iterations 0`), whose first sft_steps steps are exactly the warm-up (algos/sft.py
    warm_up). Sized to the wall time of the preset's RL runs; the arm is in `algos` only when it is > 0."""
    extends: str = ""
    """Another preset's key whose finished runs these continue, to this preset's larger budget: each run
    starts as a copy of that run (its metrics, its newest checkpoint, its optimizer state) and goes on
    with `algos.train --resume`, so the first part of its curve is that run's. No warm-up of its own."""


COIN5 = ("--env-kwargs", "level", "5", "num_games", "32", "num_held_out", "32")  # coin collector level 5, 32 games
# The invalid-action penalty on the faulty step's own reward, with group statistics over step rows:
# the defaults since the no-harm measurements (docs/benchmarks.md, "No harm"), named where a preset
# compares them. The presets measured before name the earlier defaults (RETURN_PLACEMENT, the penalty
# inside the returns with per-trajectory statistics), so that their runs reproduce under today's.
PENALTY_STEP = ("--penalty-placement", "step", "--episode-baseline", "step")
COIN3 = ("--env-kwargs", "level", "3", "num_games", "32", "num_held_out", "32")
PRESETS = {
    # The default job's config: ~1,300 env steps per iteration (dynamic sampling adds groups), 18 s
    # per iteration alone on 2 cores (README), SFT warm-up ~45 s. Measured with --jobs 2 (one thread
    # each) while a third process held a core: 44-55 s per iteration (train 31-37 s), an evaluation of
    # 32 episodes ~6 s; with a free core each that is ~30 s per iteration (~22 ms per env step).
    # 13,000 env steps = ~10 iterations: ~6 min per run with its 6 evaluations.
    "keydoor": Preset("KeyDoor-v0", "configs/default.yaml", RETURN_PLACEMENT, budget=13_000, eval_every=2,
                      eval_episodes=64),  # fmt: skip
    # configs/textworld_coin.yaml at level 7 (7-step routes; level 10 costs 65 s per iteration, level 3
    # is solved by the warm-up alone) with 4 groups of 8. Measured with one process on one core
    # (OMP_NUM_THREADS=1): SFT warm-up 5.5 min, held-out success after it 44 %; iterations 45-53 s at
    # 600-700 env steps (train ~38 s of it; ~75 ms per env step), 62 % after 2 iterations; an
    # evaluation of 32 episodes ~10 s. 4,000 env steps = ~6 iterations: ~6 min per run.
    # Games: 100 training + 32 held-out, generated once (~2.3 min on 2 cores).
    "textworld": Preset(
        "TextWorld-CoinCollector-v0",
        "configs/textworld_coin.yaml",
        ("--env-kwargs", "level", "7", "--num-groups", "4", *RETURN_PLACEMENT),
        budget=4_000,
        eval_every=2,
        eval_episodes=32,
    ),
    # The credit-assignment env: KeyDoor-Hard-v0 (4x4 rooms with walls, a chain of two locks, distractors
    # and a key that fits nothing; expert routes of 11-26 steps, mean 17, within a 40-step limit), under
    # GiGPO as its authors run it (configs/gigpo_verl_agent.yaml). Cut to fit 8 seeds in about an hour
    # with --jobs 2: a 100-step SFT warm-up (300 steps took 11.5 min on a shared core), 6,000 env steps.
    "keydoor-hard": Preset(
        "KeyDoor-Hard-v0",
        "configs/gigpo_verl_agent.yaml",
        ("--env", "KeyDoor-Hard-v0"),
        budget=6_000,
        eval_every=2,
        eval_episodes=48,
        sft_steps=100,
    ),
    # The same env, warm-ups and budget under the default settings (configs/keydoor_hard.yaml), to set
    # against keydoor-hard (which settings should be the default).
    "keydoor-hard-defaults": Preset(
        "KeyDoor-Hard-v0",
        "configs/keydoor_hard.yaml",
        ("--target-kl", "0", "--sft-episodes", "200", *RETURN_PLACEMENT),  # as before the KL early stop; the same warm-up
        budget=6_000,
        eval_every=2,
        eval_episodes=48,
        sft_steps=100,
        warm_from="keydoor-hard",
    ),
    # Little left to learn: coin collector level 5 (32 training games), whose warm-up already wins nearly
    # every held-out game. 8 iterations (~320 env steps each once solved) should keep held-out success
    # within 5 points of the warm-up and the invalid-action rate within 2 points.
    "coin5-solved": Preset(
        "TextWorld-CoinCollector-v0",
        "configs/textworld_coin.yaml",
        (*COIN5, *RETURN_PLACEMENT),
        budget=2_600,
        eval_every=4,
        eval_episodes=32,
    ),
    # The default job's env and warm-ups with the invalid-action penalty on the faulty step only and
    # group statistics over step rows (verl-agent's placement). Under the default (the penalty inside the
    # returns), scripts.trace_credit shows invalid actions late in a lost episode getting positive
    # advantages: in a state the agent is stuck in, a later row has fewer penalties still to come.
    # The default job's runs continued to twice the budget (about the README job's 24 iterations): at
    # 13,000 env steps neither algorithm gained 15 points over the shared warm-up on average (7 seeds).
    "keydoor-26k": Preset("KeyDoor-v0", "configs/default.yaml", RETURN_PLACEMENT, budget=26_000, eval_every=2, eval_episodes=64,
                          extends="keydoor"),  # fmt: skip
    "keydoor-penalty-step": Preset("KeyDoor-v0", "configs/default.yaml",
                                   PENALTY_STEP, budget=13_000,
                                   eval_every=2, eval_episodes=64, warm_from="keydoor"),  # fmt: skip
    # No harm (issue 34): coin collector level 3 (3-step routes), 32 training and 32 held-out games, whose
    # warm-up should already win (nearly) every held-out game. 16 iterations of the default settings
    # should keep held-out success within 5 points of the warm-up, invalid actions within 2 points.
    # Measured with one process on one core: warm-up ~4 min, 16 iterations ~4 min (~250 env steps each);
    # the warm-ups of seeds 0-2 win 93.8, 100 and 100 % (docs/benchmarks.md, "No harm").
    "coin3-solved": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml", (*COIN3, *RETURN_PLACEMENT),
                           budget=100_000,
                           iterations=16, eval_every=4, eval_episodes=32),  # fmt: skip
    # The guards on it, from the same warm-ups: the KL early stop; group statistics over step rows (so
    # that a group's advantages sum to 0 over its rows: under the per-trajectory baseline a penalised
    # episode's extra rows make every all-won batch net-negative); the penalty on its own step.
    "coin3-solved-kl": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml",
                              (*COIN3, *RETURN_PLACEMENT, "--target-kl", "0.05"), budget=100_000, iterations=16, eval_every=4,
                              eval_episodes=32, algos=("gigpo",), warm_from="coin3-solved"),  # fmt: skip
    "coin3-solved-baseline-step": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml",
                                         (*COIN3, "--penalty-placement", "return", "--episode-baseline", "step"), budget=100_000, iterations=16,
                                         eval_every=4, eval_episodes=32, warm_from="coin3-solved"),  # fmt: skip
    "coin3-solved-penalty-step": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml",
                                        (*COIN3, *PENALTY_STEP), budget=100_000, iterations=16,
                                        eval_every=4, eval_episodes=32, warm_from="coin3-solved"),  # fmt: skip
    # Chat against window context (issue 33): GiGPO alone, each context with its own warm-up of the same
    # settings (90 SFT steps on the same expert demonstrations, read as that context's prompts), the same
    # seed, hyperparameters and env-step budget. The window arm with memory 1 is the default job's
    # setting, so it shares the keydoor / coin5-solved warm-ups.
    "keydoor-window": Preset("KeyDoor-v0", "configs/default.yaml", RETURN_PLACEMENT, budget=13_000, eval_every=2,
                             eval_episodes=64, algos=("gigpo",), warm_from="keydoor"),  # fmt: skip
    "keydoor-memory3": Preset("KeyDoor-v0", "configs/default.yaml", (*RETURN_PLACEMENT, "--memory", "3"), budget=13_000,
                              eval_every=2, eval_episodes=64, algos=("gigpo",)),  # fmt: skip
    "keydoor-chat": Preset("KeyDoor-v0", "configs/default.yaml", (*RETURN_PLACEMENT, "--context", "chat"), budget=13_000,
                           eval_every=2, eval_episodes=64, algos=("gigpo",)),  # fmt: skip
    "coin5-window": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml", (*COIN5, *RETURN_PLACEMENT), budget=2_600,
                           eval_every=4, eval_episodes=32, algos=("gigpo",), warm_from="coin5-solved"),  # fmt: skip
    "coin5-memory3": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml", (*COIN5, *RETURN_PLACEMENT, "--memory", "3"),
                            budget=2_600, eval_every=4, eval_episodes=32, algos=("gigpo",)),  # fmt: skip
    "coin5-chat": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml", (*COIN5, *RETURN_PLACEMENT, "--context", "chat"),
                         budget=2_600, eval_every=4, eval_episodes=32, algos=("gigpo",)),  # fmt: skip
    # GiGPO against GRPO where both learn (issue 34): the `textworld` preset's env and budget under today's
    # defaults, with its own warm-ups. Under the earlier defaults both arms gained 23-25 points over the
    # shared warm-up in 4,000 env steps (3 seeds). Per seed on one core: a warm-up ~5.5 min, each run
    # ~6 min; the level-7 games are generated by the first warm-up (~2.3 min on 2 cores, then cached).
    "coin7": Preset("TextWorld-CoinCollector-v0", "configs/textworld_coin.yaml",
                    ("--env-kwargs", "level", "7", "--num-groups", "4"), budget=4_000, eval_every=2,
                    eval_episodes=32),  # fmt: skip
    # Sokoban level 1 (5x5, one box, optimal plans of 6-15 moves, 30-step limit): a short run, to show
    # the env trains end to end; one seed is a demonstration, not a comparison.
    "sokoban": Preset("Sokoban-v0", "configs/sokoban.yaml", RETURN_PLACEMENT, budget=3_000, eval_every=2, eval_episodes=32),
    # A real model (issue 55): SmolLM2-135M-Instruct under its preset (configs/smollm2-135m.yaml: a 30-step SFT warm-up,
    # 2 groups of 4 on KeyDoor-Easy-v0). The final iteration is fixed in advance at the preset's 16; held-out success
    # is measured on 128 tasks after the warm-up and after iteration 16 only (each episode in held_out.jsonl, so
    # that the lift is paired task by task). Per seed on one core of the AVX2-only EPYC: warm-up ~10 min, a run
    # ~90 min; about 4x faster on a CPU with AVX512-BF16.
    "smollm2": Preset("KeyDoor-Easy-v0", "configs/smollm2-135m.yaml", (), budget=1_000_000, iterations=16,
                      eval_every=16, eval_episodes=128, sft_steps=30),
}
# The rest of the real-model study (issue 55), the smollm2 preset's settings and fixed final iteration with one
# setting changed; GiGPO alone. Chat against window: the conversation SmolLM2 was tuned on, with its own warm-ups
# (the same demonstrations read as a conversation). A harder env, KeyDoor-v0 (walls, two distractors and a key that
# fits nothing, a 20-step limit against 16), with its own warm-ups. LoRA (rank 16) from the smollm2
# warm-ups, at three learning rates around 10x full fine-tuning's 5e-6.
SMOLLM2 = PRESETS["smollm2"]
LORA_LRS = ("2e-5", "5e-5", "2e-4")
PRESETS |= {
    "smollm2-chat": replace(SMOLLM2, flags=("--context", "chat"), algos=("gigpo",)),
    "smollm2-keydoor": replace(SMOLLM2, env="KeyDoor-v0", flags=("--env", "KeyDoor-v0"), algos=("gigpo",)),
} | {
    f"smollm2-lora-lr{lr}": replace(SMOLLM2, flags=("--lora-rank", "16", "--lr", lr), algos=("gigpo",), warm_from="smollm2")
    for lr in LORA_LRS
}
# Ablations of the default job (issue 34): GiGPO from the keydoor warm-ups (the sft ones make their
# own, with another number of SFT steps), one setting changed at a time, the keydoor preset's budget
# and evaluations; each is compared seed by seed against its base, on the same seeds. The first ones
# were measured while the penalty sat inside the returns (base: keydoor); the rest change the penalty on
# its own step (base: keydoor-penalty-step, 90 SFT steps), but keydoor-sft360, which doubles the
# warm-up of keydoor-sft180 (today's defaults are keydoor-sft360).
ABLATIONS = {  # the flags of each run: the earlier defaults, one setting changed
    "lr5e-4": (*RETURN_PLACEMENT, "--lr", "5e-4"),
    "epochs4": (*RETURN_PLACEMENT, "--ppo-epochs", "4"),
    "baseline-step": ("--penalty-placement", "return", "--episode-baseline", "step"),
    "norm-mean": (*RETURN_PLACEMENT, "--norm", "mean"),
    "temp0.7": (*RETURN_PLACEMENT, "--temperature", "0.7"),
}
ABLATIONS_STEP = {  # the penalty on its own step with 90 SFT steps, one setting changed
    "lr5e-5": (*PENALTY_STEP, "--lr", "5e-5"),
    "epochs1": (*PENALTY_STEP, "--ppo-epochs", "1"),
    "groups16x4": (*PENALTY_STEP, "--num-groups", "16", "--group-size", "4"),  # the same 64 rollouts per iteration
    "target-kl": (*PENALTY_STEP, "--target-kl", "0.05"),
}
PRESETS |= {
    f"keydoor-{name}": Preset("KeyDoor-v0", "configs/default.yaml", flags, budget=13_000, eval_every=2,
                              eval_episodes=64, algos=("gigpo",), warm_from="keydoor")  # fmt: skip
    for name, flags in (ABLATIONS | ABLATIONS_STEP).items()
}
PRESETS |= {
    f"keydoor-sft{steps}": Preset("KeyDoor-v0", "configs/default.yaml", PENALTY_STEP, budget=13_000, eval_every=2,
                                  eval_episodes=64, sft_steps=steps, algos=("gigpo",))  # fmt: skip
    for steps in (45, 180, 360)
}
# Today's defaults (360 SFT steps), one RL setting changed, from keydoor-sft360's own warm-ups: whether
# what the 90-step rows chose still holds once the warm-up starts near 60 %. Each is keydoor-sft360
# with these flags added.
ABLATIONS_360 = {
    "lr5e-4": ("--lr", "5e-4"),
    "epochs4": ("--ppo-epochs", "4"),
    "temp1.3": ("--temperature", "1.3"),
    "target-kl": ("--target-kl", "0.05"),
}
SFT360 = PRESETS["keydoor-sft360"]
PRESETS |= {
    f"keydoor-sft360-{name}": replace(SFT360, flags=(*SFT360.flags, *flags), warm_from="keydoor-sft360")
    for name, flags in ABLATIONS_360.items()
}
ABLATION_BASES = {f"keydoor-{name}": "keydoor" for name in ABLATIONS} | {
    key: "keydoor-penalty-step" for key in (*(f"keydoor-{n}" for n in ABLATIONS_STEP), "keydoor-sft45", "keydoor-sft180")
} | {"keydoor-sft360": "keydoor-sft180"} | {f"keydoor-sft360-{name}": "keydoor-sft360" for name in ABLATIONS_360}
# (preset, algo) pairs whose final success is compared seed by seed: a - b, from the same warm-ups.
COMPARISONS = (
    (("keydoor", "gigpo"), ("keydoor", "grpo")),
    (("textworld", "gigpo"), ("textworld", "grpo")),
    (("coin7", "gigpo"), ("coin7", "grpo")),
    (("keydoor-hard", "gigpo"), ("keydoor-hard", "grpo")),
    (("keydoor-hard-defaults", "gigpo"), ("keydoor-hard-defaults", "grpo")),
    (("keydoor-hard", "gigpo"), ("keydoor-hard-defaults", "gigpo")),
    (("keydoor-hard", "grpo"), ("keydoor-hard-defaults", "grpo")),
    (("coin5-solved", "gigpo"), ("coin5-solved", "grpo")),
    (("coin3-solved", "gigpo"), ("coin3-solved", "grpo")),
    (("coin3-solved-kl", "gigpo"), ("coin3-solved", "gigpo")),
    (("coin3-solved-penalty-step", "gigpo"), ("coin3-solved", "gigpo")),
    (("coin3-solved-penalty-step", "grpo"), ("coin3-solved", "grpo")),
    (("coin3-solved-penalty-step", "gigpo"), ("coin3-solved-penalty-step", "grpo")),
    (("coin3-solved-baseline-step", "gigpo"), ("coin3-solved", "gigpo")),
    (("coin3-solved-baseline-step", "grpo"), ("coin3-solved", "grpo")),
    (("keydoor-penalty-step", "gigpo"), ("keydoor-penalty-step", "grpo")),
    (("keydoor-penalty-step", "gigpo"), ("keydoor", "gigpo")),
    (("keydoor-26k", "gigpo"), ("keydoor-26k", "grpo")),
    (("keydoor-penalty-step", "grpo"), ("keydoor", "grpo")),
    (("sokoban", "gigpo"), ("sokoban", "grpo")),
    (("keydoor-chat", "gigpo"), ("keydoor-window", "gigpo")),
    (("keydoor-chat", "gigpo"), ("keydoor-memory3", "gigpo")),
    (("keydoor-memory3", "gigpo"), ("keydoor-window", "gigpo")),
    (("coin5-chat", "gigpo"), ("coin5-window", "gigpo")),
    (("coin5-chat", "gigpo"), ("coin5-memory3", "gigpo")),
    (("coin5-memory3", "gigpo"), ("coin5-window", "gigpo")),
    *(((key, "gigpo"), (base, "gigpo")) for key, base in ABLATION_BASES.items()),
    (("smollm2", "gigpo"), ("smollm2", "grpo")),
    (("smollm2", "gigpo"), ("smollm2", "sft")),
    (("smollm2-chat", "gigpo"), ("smollm2", "gigpo")),
    *(((f"smollm2-lora-lr{lr}", "gigpo"), ("smollm2", "gigpo")) for lr in LORA_LRS),
)
