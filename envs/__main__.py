"""`python -m envs`: list the registered text envs with their knobs and limits."""

import gymnasium as gym

import envs

for env_id, (kwargs, steps, doc) in envs.KEYDOOR_IDS.items():
    knobs = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    print(f"{env_id:22s} {doc}\n{'':22s} max_episode_steps={steps}; expert, state keys; knobs: {knobs}")
others = sorted(
    i for i, s in gym.registry.items() if isinstance(s.entry_point, str) and s.entry_point.startswith("envs.")
)
for env_id in others:
    if env_id not in envs.KEYDOOR_IDS:
        print(env_id)
