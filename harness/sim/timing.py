"""The card x model timing model: a decode step, a prefill forward and a load-back from first principles.

    decode step   = weight bytes read / (eta_bw x BW) + KV bytes read / (eta_bw x BW) + per-sequence cost,
                    or the step's FLOPs / effective peak when a large batch makes it compute-bound
    prefill       = max(weight bytes / (eta_bw x BW), FLOPs / (eta_c x peak x f_SM / f_max)) + launch cost
    load-back     = KV bytes / host link bandwidth (overlapped with the forward layer by layer)

FLOPs are 2 per active weight per token plus 4 x layers x heads x head_dim per (query, context token)
pair; the LM head runs once per sequence in a prefill. An MoE step reads the experts its tokens route to.
The default device pool follows SGLang 0.5.23's own rule (arg_groups/memory_hook.py): memory left after
the weights and `reserved_mem` = 512 MB + 1.5 MB per chunked-prefill token + 2 MB per CUDA-graph batch
size (+ 128 MB for tp 1), at least 10 GiB on cards over 60 GiB.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.sim.cards import (
    DECODE_PER_SEQ_S,
    ETA_BW,
    ETA_C,
    PREFILL_PER_LAYER_S,
    Card,
    CardProfile,
)
from harness.sim.models import ModelShape

MIB = 1024**2
GIB = 1024**3
OS_RESERVE_GIB = 8.0  # what the OS and runtime keep of a unified memory (GB10)


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


def reserved_mib(card: Card) -> float:
    """SGLang's reserved_mem (activations and CUDA graphs) in MiB."""
    chunk, max_bs = sglang_defaults(card)
    reserved = 512 + max(chunk, 2048) * 1.5 + 1024 / 8 + max_bs * 2
    if card.visible_gib > 60:
        reserved = max(reserved, 10 * 1024)
    return reserved


@dataclass(frozen=True)
class PhysicsProfile(CardProfile):
    """A CardProfile computed from a card's datasheet and a model's config (see the module docstring)."""

    hw: Card | None = None
    shape: ModelShape | None = None
    sm_clock_mhz: float = 0.0
    eta_bw: float = ETA_BW
    eta_c: float = ETA_C

    # --- the three rates ---------------------------------------------------------------------------
    @property
    def bw(self) -> float:
        assert self.hw is not None
        return self.eta_bw * self.hw.bw_gb_s * 1e9

    @property
    def flops(self) -> float:
        """Effective FLOP/s at the modelled SM clock."""
        assert self.hw is not None
        return self.eta_c * self.hw.bf16_tflops * 1e12 * self.sm_clock_mhz / self.hw.sm_max_mhz

    # --- CardProfile's interface -------------------------------------------------------------------
    def prefill_time(self, new_tokens: int, cached_before: int) -> float:
        """Compute time of one sequence's prefill (no overhead, no weight floor)."""
        if new_tokens <= 0:
            return 0.0
        s = self.shape
        assert s is not None
        ctx_sum = new_tokens * cached_before + new_tokens * (new_tokens + 1) / 2
        work = new_tokens * s.linear_flops_per_token + s.lm_head_flops + s.attn_flops_per_ctx_token * ctx_sum
        return work / self.flops

    def batch_prefill_time(self, parts: list[tuple[int, int]]) -> float:
        if not parts:
            return 0.0
        assert self.shape is not None
        tokens = sum(n for n, _ in parts)
        compute = sum(self.prefill_time(n, c) for n, c in parts)
        floor = self.shape.step_weight_bytes(tokens) / self.bw
        return self.prefill_overhead_s + max(compute, floor)

    def decode_time(self, batch_size: int, context_tokens: int) -> float:
        if batch_size <= 0:
            return 0.0
        s = self.shape
        assert s is not None
        memory = (s.step_weight_bytes(batch_size) + context_tokens * s.kv_bytes_per_token) / self.bw
        compute = (
            batch_size * (s.linear_flops_per_token + s.lm_head_flops)
            + s.attn_flops_per_ctx_token * context_tokens
        ) / self.flops
        return max(memory, compute) + DECODE_PER_SEQ_S * batch_size

    def host_memory_bytes(self, pool_tokens: int) -> float | None:
        """Host RAM HiCache may use: the server's, or on a unified-memory card what the weights, the device
        pool and the OS leave of the one memory."""
        hw, s = self.hw, self.shape
        assert hw is not None and s is not None
        if hw.unified:
            return (
                hw.visible_gib * GIB
                - s.weight_bytes
                - pool_tokens * s.kv_bytes_per_token
                - OS_RESERVE_GIB * GIB
            )
        return hw.host_mem_gb * 1e9

    def describe(self) -> str:
        assert self.hw is not None and self.shape is not None
        return (
            f"{self.name}: {self.hw.gpu} ({self.hw.bw_gb_s:g} GB/s x eta_bw {self.eta_bw:.2f}, "
            f"{self.hw.bf16_tflops:g} TFLOPS bf16 x eta_c {self.eta_c:.2f} at {self.sm_clock_mhz:.0f}/"
            f"{self.hw.sm_max_mhz:.0f} MHz), {self.shape.describe()}; pool {self.default_pool_tokens:,} tokens"
        )


def default_pool_tokens(hw: Card, shape: ModelShape) -> int:
    """SGLang's max_total_tokens for this card and model: memory - weights - reserved, in KV tokens."""
    free = hw.visible_gib * GIB - shape.weight_bytes - reserved_mib(hw) * MIB
    return max(0, int(free // shape.kv_bytes_per_token))


def physics_profile(hw: Card, shape: ModelShape, sm_clock_mhz: float) -> PhysicsProfile:
    chunk, max_bs = sglang_defaults(hw)
    kv = shape.kv_bytes_per_token
    probe = PhysicsProfile(
        name=f"{hw.name}/{shape.name}",
        gpu=hw.gpu,
        model=shape.name,
        prefill_tokens_per_s=0.0,
        prefill_overhead_s=PREFILL_PER_LAYER_S * shape.layers,
        attn_per_ctx_token=shape.attn_flops_per_ctx_token / shape.linear_flops_per_token,
        decode_base_s=0.0,
        decode_per_req_s=DECODE_PER_SEQ_S,
        decode_per_ctx_token_s=0.0,
        h2d_gb_per_s=hw.host_link_gb_s,
        kv_bytes_per_token=kv,
        default_pool_tokens=default_pool_tokens(hw, shape),
        chunked_prefill_size=chunk,
        max_running_requests=256 if hw.visible_gib < 60 else 1024,  # the sim's earlier profiles
        context_length=shape.context_length,
        gpu_mem_gb=hw.mem_gb,
        num_layers=shape.layers,
        hw=hw,
        shape=shape,
        sm_clock_mhz=sm_clock_mhz,
    )
    # the summary figures a reader of to_dict() wants: linear prefill rate, batch-1 decode step, KV read
    from dataclasses import replace

    return replace(
        probe,
        prefill_tokens_per_s=probe.flops / shape.linear_flops_per_token,
        decode_base_s=shape.step_weight_bytes(1) / probe.bw,
        decode_per_ctx_token_s=kv / probe.bw,
    )
