"""Data-parallel training on torch.distributed: one process per device, launched by torchrun.

    torchrun --nproc_per_node 4 -m algos.train --config configs/qwen2.5-1.5b.yaml   # 4 GPUs
    torchrun --nproc_per_node 2 -m algos.train --iterations 4                       # 2 CPU processes

torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; without them (plain `python -m algos.train`)
everything here is a no-op for one process. With them:

- every rank runs the same data layer (same seed, same decisions) but collects only its
  share of each iteration's groups with its own generation engine; the trajectories are
  then gathered, so task sampling, dynamic sampling, advantages and metrics are identical
  on every rank, and each rank trains on the groups it collected;
- the policy is sharded with FSDP2 (`torch.distributed.fsdp.fully_shard`, one unit per
  decoder layer) or replicated with DDP (`--parallel ddp`); in both, gradients are averaged
  over ranks, so the learner multiplies each rank's loss by the world size and divides by
  the *global* normaliser (tokens for dapo, sequences for grpo, sequences x max tokens
  for dr_grpo): N ranks with B groups each then take the same step as one process with
  N x B groups (tests/test_distributed.py);
- collectives must run in the same order on every rank, so ranks with fewer micro-batches
  than the busiest one run zero-weighted dummy micro-batches (`aligned_chunks`);
- rank 0 alone writes logs and checkpoints; checkpoints gather full weights into Hugging Face
  format (and the full optimizer state for --resume);
- generation: the HF backend samples from the trained module (DDP) or from a full copy that is
  refreshed from the gathered weights (FSDP); vLLM engines, one per rank, join the torchrun
  world through vLLM's external_launcher executor (with --parallel ddp only; docs/scaling.md).

CPU processes use the gloo backend, GPUs NCCL. Deliberately left out: tensor/pipeline
parallelism of the learner (FSDP covers models that fit in the sum of the ranks' memory) and
hybrid sharding across nodes (a device mesh with a replicate dimension would add it).
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from agents.weights import is_sharded

PARALLEL = ("fsdp", "ddp")


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.size > 1


SINGLE = World()


def from_env() -> World:
    """The process's place in a torchrun launch (one process when launched without torchrun)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    return World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")))


def device_for(requested: str, world: World = SINGLE) -> str:
    """The device this process runs on: `auto` = cuda if there is one; under torchrun each rank
    takes cuda:LOCAL_RANK, whatever --device named."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    return f"cuda:{world.local_rank}" if requested.startswith("cuda") and world.enabled else requested


def init(requested_device: str) -> tuple[World, str]:
    """Join the process group (gloo on CPU, NCCL on CUDA); returns the world and this rank's device."""
    world = from_env()
    device = device_for(requested_device, world)
    if device.startswith("cuda") and world.enabled:
        torch.cuda.set_device(device)
    if world.enabled and not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    return world, device


def quiet_progress() -> None:
    """No progress bars on this process (every rank but 0: one set of bars on the terminal)."""
    from functools import partialmethod

    import tqdm.std

    tqdm.std.tqdm.__init__ = partialmethod(tqdm.std.tqdm.__init__, disable=True)


def close() -> None:
    """Leave the process group. The run's FSDP modules and optimizer, which hold gloo work on the group,
    are freed first (their reference cycles collected now): left to the interpreter's teardown, after the
    group is gone, they aborted a rank at exit ("terminate called without an active exception") in about
    one torchrun launch in ten on CPU (torch 2.13, FSDP2 over gloo)."""
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def wrap(model, parallel: str, world: World):
    """The module the learner trains: FSDP2-sharded (in place) or DDP-wrapped; as is for one process."""
    if not world.enabled:
        return model
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device = next(model.parameters()).device
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    for layer in decoder_layers(model):
        fully_shard(layer)
    fully_shard(model)
    return model


def decoder_layers(model) -> list[torch.nn.Module]:
    """The repeated transformer blocks (the FSDP units): the modules HF marks as not to be split."""
    names = set(getattr(unwrap(model), "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:  # a model without the marker: every ModuleList entry
        blocks = [m for lst in model.modules() if isinstance(lst, torch.nn.ModuleList) for m in lst]
    return blocks


def unwrap(model):
    """The model under a DDP wrapper and a peft adapter: the Hugging Face model itself."""
    model = getattr(model, "module", model)  # DDP
    if hasattr(model, "get_base_model"):  # peft
        model = model.get_base_model()
    return model


def full_optimizer_state(model, optimizer) -> dict:
    """The optimizer state with full (unsharded) tensors, on rank 0 (a collective under FSDP)."""
    if not is_sharded(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_optimizer_state(model, optimizer, state: dict) -> None:
    """Put back a full optimizer state (rank 0's copy is broadcast and resharded under FSDP)."""
    if not is_sharded(model):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def all_sum(values: list[float], world: World) -> list[float]:
    """Element-wise sum over ranks."""
    if not world.enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def all_max(value, world: World):
    """The largest `value` (int or float) over ranks."""
    if not world.enabled:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return type(value)(t.item())


def gather(obj, world: World) -> list:
    """Every rank's `obj`, in rank order, on every rank (pickled; keep it small)."""
    if not world.enabled:
        return [obj]
    out: list = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def broadcast(obj, world: World):
    """Rank 0's `obj` on every rank."""
    if not world.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(world: World) -> None:
    if world.enabled:
        dist.barrier()


def aligned_chunks(items: list, size: int, world: World) -> list[list | None]:
    """`items` in chunks of `size`, padded with None up to the largest chunk count of any rank:
    every rank then runs as many forward/backward passes (and so collectives) as the others."""
    chunks: list[list | None] = [items[i : i + size] for i in range(0, len(items), size)]
    return chunks + [None] * (all_max(len(chunks), world) - len(chunks))


def deal(sizes: list[int], world: World) -> list[int]:
    """Which rank collects each group: greedily the least-loaded rank, in group order (the same
    answer on every rank, and loads within one group size of each other)."""
    load = [0] * world.size
    owner = []
    for size in sizes:
        rank = min(range(world.size), key=lambda r: (load[r], r))
        owner.append(rank)
        load[rank] += size
    return owner


def peak_memory_gib(device: str) -> dict[str, float]:
    """This process's peak resident memory (and peak CUDA allocation on a GPU), in GiB."""
    import resource
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    out = {"peak_rss_gib": rss / (2**30 if sys.platform == "darwin" else 2**20)}
    if device.startswith("cuda"):
        out["cuda_peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out


def collect_share(collect, capacity: int, seeds: list[int], sizes: list[int], first_group_id: int,
                  first_traj_id: int, world: World) -> tuple[list, set[int]]:  # fmt: skip
    """This rank collects its dealt groups (in passes of at most `capacity` envs) with `collect`
    (the trainer's: seeds, sizes, first group id, first trajectory id -> trajectories); every rank
    then gets everyone's trajectories, numbered as one process would number them. Returns
    (all trajectories in id order, the group ids this rank collected)."""
    from dataclasses import replace

    if not world.enabled:  # one process collects everything, numbered as it is
        return collect(seeds, sizes, first_group_id, first_traj_id), set(range(first_group_id, first_group_id + len(sizes)))
    owner = deal(sizes, world)
    offsets = [sum(sizes[:g]) for g in range(len(sizes))]
    mine = [g for g in range(len(sizes)) if owner[g] == world.rank]
    passes: list[list[int]] = []
    for g in mine:
        if not passes or sum(sizes[h] for h in passes[-1]) + sizes[g] > capacity:
            passes.append([])
        passes[-1].append(g)
    own = []
    for groups in passes:
        trajs = collect([seeds[g] for g in groups], [sizes[g] for g in groups], 0, 0)
        for t in trajs:  # local ids -> the ids of a one-process run
            g = groups[t.group_id]
            tid = first_traj_id + offsets[g] + t.traj_id - sum(sizes[h] for h in groups[: t.group_id])
            gid = first_group_id + g
            steps = [replace(s, group_id=gid, traj_id=tid) for s in t.steps]
            own.append(replace(t, group_id=gid, traj_id=tid, steps=steps))
    everyone = sorted((t for part in gather(own, world) for t in part), key=lambda t: t.traj_id)
    return everyone, {first_group_id + g for g in mine}
