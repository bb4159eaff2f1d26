"""Data-parallel update vs one process (tests/test_distributed.py launches this with torchrun).

    python -m torch.distributed.run --nproc_per_node 2 tests/dist_worker.py OUT_DIR

For every case each rank updates the tiny model on its half of a fixed sample set, through the
real Learner wrapped as the trainer wraps it (FSDP2 or DDP); rank 0 saves the full weights and
the update's metrics to OUT_DIR/<case>.pt. `single_process` runs the same update on all the
samples in one process, for comparison.
"""

from __future__ import annotations

import random
import sys
from dataclasses import replace

import torch

from agents.model import load_model, resolve_model
from agents.weights import full_state_dict
from algos import distributed
from algos.config import LearnerConfig
from algos.learner import Learner
from algos.logprobs import Sample, collate, response_logprobs

RANKS = 2
# (name, parallel, learner options): two SGD steps each (ppo_epochs=2), micro-batches of 3
CASES = [
    ("ddp-dapo", "ddp", dict(loss_type="dapo")),
    ("fsdp-dapo", "fsdp", dict(loss_type="dapo")),
    ("fsdp-grpo", "fsdp", dict(loss_type="grpo")),
    ("ddp-grpo", "ddp", dict(loss_type="grpo")),
    ("fsdp-dr_grpo", "fsdp", dict(loss_type="dr_grpo")),
    ("fsdp-dapo-kl", "fsdp", dict(loss_type="dapo", beta=0.1)),
    ("fsdp-idle-rank", "fsdp", dict(loss_type="grpo", split=14)),  # rank 1 has no sample at all
    ("ddp-idle-rank", "ddp", dict(loss_type="dapo", split=14)),
]
BASE = LearnerConfig(rollout_is="off", autocast="off", lr=0.05, ppo_epochs=2, num_minibatches=1, micro_batch_size=3, max_grad_norm=1e9, warmup_steps=0)


def model():
    torch.manual_seed(0)
    return load_model(resolve_model("tiny"), "cpu", torch.float32)


def samples(n: int = 14) -> list[Sample]:
    """Prompts and responses of varied lengths; old logprobs = the model's own, perturbed so that
    some ratios leave the clip range. Rank r's share is the r-th contiguous block (its "groups");
    the blocks differ in size and token count, so the global normalisers matter."""
    rng = random.Random(0)
    net = model()
    out = []
    for _ in range(n):
        prompt = [rng.randrange(10, 900) for _ in range(rng.randint(3, 12))]
        response = [rng.randrange(10, 900) for _ in range(rng.randint(1, 8))]
        out.append(Sample(prompt, response, rng.uniform(-2, 2), [0.0] * len(response)))
    with torch.no_grad():
        logp, _ = response_logprobs(net, collate(out, 0, "cpu"))
    return [
        replace(s, old_logprobs=[v + rng.uniform(-0.3, 0.3) for v in logp[row, -len(s.response_ids) :].tolist()])
        for row, s in enumerate(out)
    ]


def share(items: list, rank: int, size: int, split: int = 9) -> list:
    """Unequal contiguous blocks: rank 0 gets `split` of 14 (9 by default), rank 1 the rest."""
    cut = [0, split, len(items)] if size == 2 else [round(len(items) * r / size) for r in range(size + 1)]
    return items[cut[rank] : cut[rank + 1]]


def learner(net, options: dict, world, parallel: str) -> Learner:
    cfg = replace(BASE, **{k: v for k, v in options.items() if k != "split"})
    ref = None
    if cfg.beta > 0:
        ref = model().eval().requires_grad_(False)
        ref = distributed.wrap(ref, parallel, world) if parallel == "fsdp" else ref
    lrn = Learner(distributed.wrap(net, parallel, world), cfg, pad_id=0, ref_model=ref, world=world, max_new_tokens=8)
    # Plain SGD, no clipping: the step is lr x gradient, so a wrong normaliser shows in the weights
    # (Adam's step and a clipped step do not change when the gradient is scaled).
    lrn.optimizer = torch.optim.SGD(lrn.model.parameters(), lr=cfg.lr)
    lrn.scheduler = torch.optim.lr_scheduler.LambdaLR(lrn.optimizer, lambda step: 1.0)
    return lrn


def single_process(options: dict) -> tuple[dict, dict]:
    net = model()
    stats = learner(net, options, distributed.SINGLE, "fsdp").update(samples())
    return {k: v.detach().clone() for k, v in net.state_dict().items()}, stats


def main(out_dir: str) -> None:
    if distributed.from_env().main:
        resolve_model("tiny")  # built once, before the other rank reads it
    world, _ = distributed.init("cpu")
    distributed.barrier(world)
    data = samples()
    for name, parallel, options in CASES:
        net = model()
        lrn = learner(net, options, world, parallel)
        stats = lrn.update(share(data, world.rank, world.size, options.get("split", 9)))
        weights = full_state_dict(lrn.model, rank0_only=True)
        if world.main:
            torch.save({"weights": weights, "stats": stats}, f"{out_dir}/{name}.pt")
        distributed.barrier(world)
    distributed.close()


if __name__ == "__main__":
    main(sys.argv[1])
