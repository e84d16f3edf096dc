"""Named card profiles: the timing model that turns batches into seconds.

A profile says how long one prefill forward, one decode step and one host->device load-back take on
a given GPU with a given model. The numbers are first-order estimates from public specifications,
cross-checked against real SGLang log lines; they are chosen so the effects the harness measures
(prefill dominates TTFT, cache hits remove it, load-back is ~100x cheaper than recomputing) appear
at the sizes real cards show. Where each number comes from:

Model (both profiles): Llama-3.1-8B-Instruct in bf16 -- 8.0e9 parameters (16 GB of weights),
32 layers, 8 KV heads x 128 head dim, so one token's KV is 32 x 2 (K,V) x 8 x 128 x 2 bytes =
131,072 bytes (128 KiB); fp8 KV halves that. Prefill needs ~2 x 8e9 = 16 GFLOP per token for
the matmuls plus ~4 x layers x hidden = 0.52 MFLOP per token per context token for attention,
hence `attn_per_ctx_token` = 0.52e6 / 16e9 = 3.3e-5 (a token that attends to 2,048 earlier tokens
costs 7% more than one that attends to none).

`l4-8b` (NVIDIA L4, 24 GB GDDR6 at 300 GB/s, 121 TFLOPS bf16 dense, PCIe Gen4 x16):
- prefill_tokens_per_s 1,600: the real L4 prefill lines quoted in reference/sglang.md report input
  throughput 1,432-1,606 token/s (an L4 at its ~1.2 GHz sustained clock, not the spec's boost).
- decode step 52 ms + 0.35 ms per running request + context x 0.44 us: the step is bound by
  reading the 16 GB of weights at 300 GB/s (53 ms; L4 single-stream decode of an 8B model is
  ~18-19 token/s), each context token adds 128 KiB of KV read (0.44 us at 300 GB/s), and each
  sequence adds a little sampling/launch work.
- h2d_gb_per_s 20: PCIe Gen4 x16 is 32 GB/s raw, ~20-25 GB/s achieved for pinned copies.
- default pool 36,000 tokens: 24 GB - 16 GB weights - activations/graphs at
  --mem-fraction-static 0.9 leaves ~4.7 GB of KV = ~36k tokens at 128 KiB.
- chunked_prefill_size 4,096: the real L4 lines in the reference show 4,096-token prefill batches.

`h200-8b` (NVIDIA H200 SXM, 141 GB HBM3e at 4.8 TB/s, 989 TFLOPS bf16 dense, PCIe Gen5 x16):
- prefill_tokens_per_s 24,000: 16 GFLOP/token at ~40% of 989 TFLOPS is ~24.7k token/s, in line with
  published SGLang/vLLM single-H100/H200 prefill figures for 8B models (15-30k token/s).
- decode step 6.0 ms + 0.05 ms per running request + context x 0.03 us: 16 GB at 4.8 TB/s is 3.3 ms,
  plus launch/sampling overhead (single-stream 8B decode on H200 runs ~150-170 token/s); KV read
  at 4.8 TB/s is 0.027 us per context token.
- h2d_gb_per_s 50: PCIe Gen5 x16 is 64 GB/s raw, ~50 GB/s achieved.
- default pool 850,000 tokens: 141 GB x 0.9 - 16 GB weights - ~4 GB activations ~ 107 GB of KV.
- chunked_prefill_size 8,192: SGLang's default for large-memory cards.

`tiny-test`: a fast, exaggerated profile for tests (prefill 20k token/s, 2 ms decode, small pool).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CardProfile:
    """Timing model of one GPU + model pair; all times in (unscaled) seconds."""

    name: str
    gpu: str
    model: str
    prefill_tokens_per_s: float
    prefill_overhead_s: float
    attn_per_ctx_token: float
    decode_base_s: float
    decode_per_req_s: float
    decode_per_ctx_token_s: float
    h2d_gb_per_s: float
    kv_bytes_per_token: int
    default_pool_tokens: int
    chunked_prefill_size: int
    max_running_requests: int
    context_length: int
    gpu_mem_gb: float
    num_layers: int = 32

    def prefill_time(self, new_tokens: int, cached_before: int) -> float:
        """One sequence's prefill of `new_tokens` after `cached_before` tokens already in KV."""
        if new_tokens <= 0:
            return 0.0
        # each new token attends to everything before it: sum of contexts = n*c + n(n-1)/2
        ctx_sum = new_tokens * cached_before + new_tokens * (new_tokens - 1) / 2
        return (new_tokens + self.attn_per_ctx_token * ctx_sum) / self.prefill_tokens_per_s

    def batch_prefill_time(self, parts: list[tuple[int, int]]) -> float:
        """A prefill forward over (new_tokens, cached_before) per sequence."""
        if not parts:
            return 0.0
        return self.prefill_overhead_s + sum(self.prefill_time(n, c) for n, c in parts)

    def decode_time(self, batch_size: int, context_tokens: int) -> float:
        """One decode step for `batch_size` sequences holding `context_tokens` tokens in total."""
        if batch_size <= 0:
            return 0.0
        return (
            self.decode_base_s
            + self.decode_per_req_s * batch_size
            + self.decode_per_ctx_token_s * context_tokens
        )

    def prefill_with_load_back(
        self, parts: list[tuple[int, int]], load_tokens: int, kv_bytes_per_token: int | None = None
    ) -> float:
        """A prefill forward whose host->device load-back overlaps it layer by layer, as HiCache's
        layer-wise loading does: layer i computes once its KV has landed, so the batch takes the longer of
        the two streams plus one layer of the other (the pipeline's fill or drain)."""
        fwd = self.batch_prefill_time(parts)
        load = self.load_back_time(load_tokens, kv_bytes_per_token)
        if load <= 0.0:
            return fwd
        layers = max(1, self.num_layers)
        return max(fwd + load / layers, load + fwd / layers)

    def load_back_time(self, tokens: int, kv_bytes_per_token: int | None = None) -> float:
        """Copying `tokens` of KV from the host pool into device slots over PCIe."""
        if tokens <= 0:
            return 0.0
        per = kv_bytes_per_token or self.kv_bytes_per_token
        return tokens * per / (self.h2d_gb_per_s * 1e9)

    def to_dict(self) -> dict:
        return asdict(self)


_KV_8B = 32 * 2 * 8 * 128 * 2  # 131,072 bytes per token in bf16

PROFILES: dict[str, CardProfile] = {
    "l4-8b": CardProfile(
        name="l4-8b",
        gpu="NVIDIA L4",
        model="meta-llama/Llama-3.1-8B-Instruct",
        prefill_tokens_per_s=1600.0,
        prefill_overhead_s=0.010,
        attn_per_ctx_token=3.3e-5,
        decode_base_s=0.052,
        decode_per_req_s=0.00035,
        decode_per_ctx_token_s=0.44e-6,
        h2d_gb_per_s=20.0,
        kv_bytes_per_token=_KV_8B,
        default_pool_tokens=36_000,
        chunked_prefill_size=4096,
        max_running_requests=256,
        context_length=131_072,
        gpu_mem_gb=24.0,
    ),
    "h200-8b": CardProfile(
        name="h200-8b",
        gpu="NVIDIA H200",
        model="meta-llama/Llama-3.1-8B-Instruct",
        prefill_tokens_per_s=24_000.0,
        prefill_overhead_s=0.004,
        attn_per_ctx_token=3.3e-5,
        decode_base_s=0.006,
        decode_per_req_s=0.00005,
        decode_per_ctx_token_s=0.03e-6,
        h2d_gb_per_s=50.0,
        kv_bytes_per_token=_KV_8B,
        default_pool_tokens=850_000,
        chunked_prefill_size=8192,
        max_running_requests=1024,
        context_length=131_072,
        gpu_mem_gb=141.0,
    ),
    "tiny-test": CardProfile(
        name="tiny-test",
        gpu="simulated",
        model="sim-tiny",
        prefill_tokens_per_s=20_000.0,
        prefill_overhead_s=0.001,
        attn_per_ctx_token=0.0,
        decode_base_s=0.002,
        decode_per_req_s=0.0,
        decode_per_ctx_token_s=0.0,
        h2d_gb_per_s=10.0,
        kv_bytes_per_token=_KV_8B,
        default_pool_tokens=20_000,
        chunked_prefill_size=2048,
        max_running_requests=64,
        context_length=32_768,
        gpu_mem_gb=24.0,
    ),
}

DEFAULT_PROFILE = "l4-8b"


def get_profile(name: str) -> CardProfile:
    """The named profile, or a HarnessError listing the known names."""
    try:
        return PROFILES[name]
    except KeyError:
        from harness.errors import HarnessError

        raise HarnessError(
            f"--card-profile: unknown profile {name!r} (known: {', '.join(PROFILES)})"
        ) from None
