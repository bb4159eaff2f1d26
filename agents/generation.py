"""What the agent's generation is asked for: the per-call `Sampling` record, and the two config
sections that the trainer's flags fill, `SamplingConfig` (prompts and sampling) and `EngineConfig`
(the generation engine and its weight sync). Torch-free, so the config imports light.

Each section checks its own values (`check`, raising ValueError with a one-line message); the
trainer's config (algos/config.py) composes the sections and turns those errors into exit code 2.
Field docstrings are the `python -m algos.train --help` text.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.prompt import TEMPLATES
from agents.tools import ACTION_FORMATS
from envs.base import at_least, choose

CONTEXTS = ("window", "chat")


@dataclass(frozen=True)
class SamplingConfig:
    """-- prompts and sampling --"""

    context: str = "window"
    """window (every step's prompt rebuilt from the last --memory steps, one sample per step) or chat (an
    episode is one conversation: each prompt is the whole conversation so far, one sample per episode)."""
    memory: int = 1
    """Past (observation, action) pairs shown in each prompt (window context)."""
    max_context_tokens: int = 4096
    """chat context: the longest conversation (prompt + reply); an episode that would outgrow it ends truncated."""
    prompt_template: str = "auto"
    """auto (the env's metadata["prompt_template"]), default, textworld or answer (single-turn problems)."""
    action_format: str = "tag"
    """tag (<action>command</action>), tool_call (<tool_call>{"name", "arguments"}</tool_call>) or json (a bare call object); tools: the env's metadata["tools"], else one `act` tool over the admissible commands."""
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 16
    max_prompt_tokens: int = 1024
    generation_batch_size: int = 128
    """HF backend: prompts per forward pass (vLLM schedules its own batches)."""

    def sampling(self) -> Sampling:
        return Sampling(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens)

    def check(self) -> None:
        choose("prompt_template", self.prompt_template, ("auto", *TEMPLATES))
        choose("action_format", self.action_format, ACTION_FORMATS)
        choose("context", self.context, CONTEXTS)
        for name in ("max_new_tokens", "max_prompt_tokens", "max_context_tokens", "generation_batch_size"):
            at_least(name, getattr(self, name), 1)
        at_least("memory", self.memory, 0)
        at_least("temperature", self.temperature, 0)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p})")
        if self.context == "chat" and self.max_context_tokens <= self.max_new_tokens:
            raise ValueError(f"max_context_tokens ({self.max_context_tokens}) must exceed max_new_tokens "
                             f"({self.max_new_tokens}): a conversation holds its prompt and a reply")  # fmt: skip


@dataclass(frozen=True)
class Sampling:
    """One generate call's sampling parameters; unset ones are the run's defaults (SamplingConfig)."""

    temperature: float = SamplingConfig.temperature  # 0 = greedy
    top_p: float = SamplingConfig.top_p
    max_new_tokens: int = SamplingConfig.max_new_tokens

    @property
    def score_temperature(self) -> float:
        """The temperature the rollout's logprobs are at, and the learner scores at: greedy (T = 0)
        records the logprob of the untempered distribution, T = 1."""
        return self.temperature if self.temperature > 0 else 1.0


BACKENDS = ("hf", "vllm")
LORA_SYNCS = ("auto", "adapter", "merged")


@dataclass(frozen=True)
class EngineConfig:
    """-- generation engine --"""

    backend: str = "hf"
    """hf (transformers, the reference) or vllm (an in-process vLLM engine, synced after every update)."""
    vllm_gpu_memory_utilization: float = 0.4
    """vllm on GPU: fraction of GPU memory for the engine's weights and KV cache (the learner shares the GPU)."""
    vllm_kv_cache_gib: float = 0.0
    """vllm: KV cache size in GiB; 0 = 1 GiB on CPU, what gpu_memory_utilization leaves on GPU."""
    vllm_max_model_len: int = 0
    """vllm: longest prompt + response; 0 = max_prompt_tokens + max_new_tokens."""
    vllm_enforce_eager: bool | None = None
    """vllm: no CUDA graphs; unset = eager on CPU, graphs on GPU."""
    vllm_tensor_parallel_size: int = 1
    """vllm on GPU: shard the engine over this many GPUs."""
    vllm_sleep: bool = False
    """vllm on GPU: free the KV cache (sleep mode) while the learner updates."""
    vllm_lora_sync: str = "auto"
    """vllm with --lora-rank: adapter (a sync sends only the LoRA weights; the engine keeps the base), merged
    (full weights, the adapter merged in), auto (adapter where vLLM can serve it, else merged, with a note)."""
    sync_check_every: int = 1
    """vllm: every N iterations, compare engine and trainer logprobs on a probe batch (0 = never)."""
    sync_probe_size: int = 8
    """Prompts in the sync probe batch."""
    sync_tolerance: float = 0.0
    """Largest allowed |engine - trainer| logprob on the probe; 0 = by dtype (float32 1e-3, bfloat16 0.25, float16 0.1)."""

    def check(self) -> None:
        """The engine's own values (what needs a GPU is checked against the device, algos/validate.py)."""
        choose("backend", self.backend, BACKENDS)
        choose("vllm_lora_sync", self.vllm_lora_sync, LORA_SYNCS)
        if self.sync_check_every < 0 or self.sync_probe_size < 1 or self.sync_tolerance < 0:
            raise ValueError("need sync_check_every >= 0, sync_probe_size >= 1 and sync_tolerance >= 0")
        if self.backend != "vllm":
            return
        if not 0.0 < self.vllm_gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"vllm_gpu_memory_utilization must be in (0, 1] (got {self.vllm_gpu_memory_utilization})"
            )
        if self.vllm_kv_cache_gib < 0 or self.vllm_max_model_len < 0 or self.vllm_tensor_parallel_size < 1:
            raise ValueError(
                "need vllm_kv_cache_gib >= 0, vllm_max_model_len >= 0 and vllm_tensor_parallel_size >= 1"
            )
