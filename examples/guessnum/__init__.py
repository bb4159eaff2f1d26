"""guessnum: a user's own text env package, registered with Gymnasium on import.

    PYTHONPATH=examples python -m algos.train --env guessnum:GuessNumber-v0

`--env guessnum:GuessNumber-v0` makes Gymnasium import this package first, which runs the
`register` calls below. Entry points are strings, so the env module itself is imported
only when an env is made. See docs/custom_envs.md.
"""

import gymnasium as gym

if "GuessNumber-v0" not in gym.registry:
    # The full info contract: state keys, admissible commands, an expert.
    gym.register(id="GuessNumber-v0", entry_point="guessnum.env:GuessNumberEnv", max_episode_steps=6)
    # The same game giving only won/lost: the trainer falls back where keys are missing.
    gym.register(id="GuessNumber-Bare-v0", entry_point="guessnum.env:BareGuessNumberEnv", max_episode_steps=6)
