"""How `advise --confirm` runs a what-if candidate on vLLM: its pool in blocks, the KV space its CPU build
needs, and which candidates it can run at all (lru, device only)."""

from __future__ import annotations

import math
import os
from typing import Any

# vLLM's KV block for --confirm: its pool is set in blocks (--num-gpu-blocks-override). 32, not vLLM's GPU
# default 16: the CPU build refuses 16 (docs/real-servers.md); GPU builds take 32 too.
VLLM_BLOCK = 32
VLLM_KV_ENV = "VLLM_CPU_KVCACHE_SPACE"
KV_BYTES_CEILING = 131_072  # bf16 KV bytes a token of Llama-3.1-8B, the largest of the built-in models


def vllm_can(cfg: Any) -> bool:
    """A what-if configuration (harness.whatif.grid.Config) vLLM can run: lru, no host tier, no storage."""
    return cfg.policy == "lru" and cfg.host_ratio == 0 and not cfg.storage


def vllm_pool_args(tokens: int) -> list[str]:
    """A pool of `tokens` as vLLM's flags."""
    blocks = math.ceil(tokens / VLLM_BLOCK)
    # one block more than the pool: vLLM's BlockPool holds one back as its null block
    # (vllm/v1/core/block_pool.py); --max-model-len the pool: a longer request is refused at once rather
    # than never scheduled; --enforce-eager: no graph capture at start (minutes on a CPU)
    return [
        "--num-gpu-blocks-override",
        str(blocks + 1),
        "--block-size",
        str(VLLM_BLOCK),
        "--max-model-len",
        str(blocks * VLLM_BLOCK),
        "--enforce-eager",
    ]


def vllm_env(pool: int, unit_tokens: int) -> dict[str, str]:
    """vLLM's CPU build sizes its KV space from VLLM_CPU_KVCACHE_SPACE (GiB), else it reserves
    --gpu-memory-utilization (0.92) of the host's memory and refuses to start when that much is not free:
    room for the pool at KV_BYTES_CEILING a token plus 1 GiB, unless the environment sets it. GPU builds
    ignore it."""
    if os.environ.get(VLLM_KV_ENV):
        return {}
    tokens = math.ceil(pool * unit_tokens / VLLM_BLOCK) * VLLM_BLOCK
    return {VLLM_KV_ENV: str(math.ceil(tokens * KV_BYTES_CEILING / 1024**3) + 1)}
