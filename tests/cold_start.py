"""The advantage settings of tests whose runs must update from a cold model (a few SFT steps, or none)."""

from algos.advantages import RETURN_PLACEMENT

# Such a model refuses nearly every action. Under the default advantages (the penalty on the faulty step,
# statistics over step rows) rows that are all refused score alike, so every advantage is 0 and no update
# runs, which is right: nothing in the batch says one reply was better. With the penalty inside the returns a
# row's discounted return still counts the refusals ahead of it, so the rows differ and an update runs. The
# tests that use it check the machinery around an update (checkpoints, LoRA, FSDP, vLLM sync, faults,
# logging, held samples), not what the update learns.
COLD_UPDATES = list(RETURN_PLACEMENT)
