"""SGLang 0.5.23's GPU memory settings for one card and model at tp 1: the chunked-prefill size, the decode
CUDA-graph batch, `mem_fraction_static`, and the device pool (max_total_num_tokens) they leave.

The chain, as SGLang 0.5.23 runs it (paths under sglang/srt/):
- arg_groups/memory_hook.py `handle_gpu_memory_settings`: by the card's memory (MiB, nvidia-smi's total)
  pick chunked_prefill_size and the decode CUDA graph's max_bs (<20 GiB: 2048, 8; <35: 4096, 48;
  <60: 4096, 32; <90 and <160: 8192, 256; else 16384, 512), then
  reserved_mem = 512 + 1.5 x max(chunked_prefill_size, 2048) + 1024 x tp x pp / 8 + graph reserve,
  at least 10 GiB on a card over 60 GiB, and
  mem_fraction_static = round((gpu_mem - reserved_mem) / gpu_mem, 3).
- memory_hook.py `reserve_for_graph_mb`: 2 MiB per decode max_bs, plus 8 MiB per prefill CUDA-graph size
  (the prefill graph is `breakable` by default on CUDA: model_executor/cuda_graph_config.py
  `default_prefill_backend`; its sizes up to chunked_prefill_size come from arg_groups/cuda_graph_hook.py
  `generate_prefill_cuda_graph_batch_sizes`).
- mem_cache/kv_cache_configurator.py `_profile_available_bytes`: the KV budget is the free memory after
  the weights load minus pre_model_load_memory x (1 - mem_fraction_static), where pre_model_load_memory is
  the free memory measured before the load; model_executor/pool_configurator.py `calculate_pool_sizes`
  divides it by the bytes per token (cell size). So the pool = pre x mem_fraction_static - weights.

Not modelled: the CUDA context and allocator state that make pre_model_load_memory a few hundred MiB
less than the card's total (taken here as the whole visible memory, so the sim's pool is an upper bound
by about that much), and SGLang's Llama-2 cap of the prefill graph at 4096 tokens.
"""

from __future__ import annotations

import math

from harness.sim.cards import Card
from harness.sim.models import ModelShape

MIB = 1024**2
GIB = 1024**3


def sglang_defaults(card: Card) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA-graph max batch) SGLang picks for this card's memory, tp 1."""
    gib = card.visible_gib
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 4096, 48
    if gib < 60:
        return 4096, 32
    if gib < 160:
        return 8192, 256
    return 16384, 512


def prefill_graph_sizes(max_tokens: int) -> list[int]:
    """The token counts SGLang captures a prefill CUDA graph for, up to `max_tokens` (cuda_graph_hook.py)."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_tokens + 1, 512),
    ]
    return [s for s in sizes if s <= max_tokens]


def reserved_mib(card: Card, tp: int = 1) -> float:
    """SGLang's reserved_mem (activations, metadata, CUDA graphs) in MiB, pp 1 (its 1024 x tp x pp / 8)."""
    chunk, max_bs = sglang_defaults(card)
    graphs = max_bs * 2 + len(prefill_graph_sizes(chunk)) * 8
    reserved = 512 + max(chunk, 2048) * 1.5 + 1024 * tp / 8 + graphs
    if card.visible_gib * 1024 > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


def mem_fraction_static(card: Card, tp: int = 1) -> float:
    """SGLang's default mem_fraction_static for this card: (memory - reserved_mem) / memory, to 3 places."""
    gpu_mib = card.visible_gib * 1024
    return round((gpu_mib - reserved_mib(card, tp)) / gpu_mib, 3)


def max_mem_fraction(card: Card) -> float:
    """The largest mem_fraction_static `harness advise` offers on this card: the one that leaves only the
    reserve SGLang keeps on its smallest cards (chunked prefill 2048, decode graph batch 8, no 10 GiB
    floor), never below the card's own default. Past it, activations and graphs run short of memory."""
    chunk, max_bs = 2048, 8
    least = 512 + chunk * 1.5 + 1024 / 8 + max_bs * 2 + len(prefill_graph_sizes(chunk)) * 8
    gpu_mib = card.visible_gib * 1024
    return max(mem_fraction_static(card), math.floor((gpu_mib - least) / gpu_mib * 1000) / 1000)


def pool_tokens(
    card: Card, shape: ModelShape, fraction: float | None = None, kv_bytes: int | None = None
) -> int:
    """max_total_num_tokens: pre-load memory x mem_fraction_static - weights, in KV tokens (0 when the
    weights leave nothing, where SGLang refuses to start). `fraction`: a --mem-fraction-static given;
    `kv_bytes`: the bytes a token takes when not the model's bf16 ones (FP8 KV: half)."""
    frac = mem_fraction_static(card) if fraction is None else fraction
    budget = card.visible_gib * GIB * frac - shape.weight_bytes
    return max(0, int(budget // (kv_bytes or shape.kv_bytes_per_token)))
