"""`python -m envs`: list the registered text envs with their knobs and limits."""

import envs

for env_id, (kwargs, steps, doc) in {**envs.KEYDOOR_IDS, **envs.SINGLE_TURN_IDS, **envs.TEXTWORLD_IDS}.items():
    knobs = ", ".join(f"{k}={v}" for k, v in kwargs.items()) or "games_dir=, games=, held_out_dir=, held_out_fraction="
    print(f"{env_id:28s} {doc}\n{'':28s} max_episode_steps={steps}; expert, state keys; knobs: {knobs}")
