"""Cards: datasheet figures, and the public measurements of real cards the timing model's efficiencies are
fitted to.

Since issue 15 every named card is modelled from physics (harness.sim.timing): the model's shape comes
from its config.json (harness.sim.models), the card's bandwidth, bf16 peak and clocks from its datasheet
(CARDS), and two efficiencies, eta_bw (achieved / datasheet bandwidth in a decode step) and eta_c
(achieved / peak FLOP/s in a prefill forward, at the clock it ran), are fitted once to public
measurements of real cards (`_measurements`, each with its source); `FIT_POINTS` keeps what each point
alone implies, so the spread is visible. `held_out` lists measurements kept out of the fit, the model's
out-of-sample check (harness.advise.physics_error, docs/physics.md). The profile a card name resolves to: harness.sim.timing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Card:
    """One GPU's datasheet figures; every number is cited in CARDS below."""

    name: str
    gpu: str
    mem_gb: float  # device memory, GB (1e9)
    visible_gib: float  # what CUDA reports as total memory, GiB (what SGLang sizes its pool against)
    bw_gb_s: float  # memory bandwidth, GB/s
    bf16_tflops: float  # dense bf16 tensor-core peak at the boost clock
    sm_max_mhz: float  # boost clock the peak is quoted at
    sm_typical_mhz: float  # sustained clock under a long tensor load (the default --sim-sm-clock-mhz)
    host_link_gb_s: float  # achieved host<->device copy bandwidth (pinned memory)
    host_mem_gb: float  # host RAM a single-GPU server of this kind typically has
    unified: bool = False  # host and device share one memory (GB10)


# Datasheets: L4 (nvidia.com/en-us/data-center/l4: 24 GB GDDR6, 300 GB/s, 121 TFLOPS bf16 dense
# (242 with sparsity), boost 2,040 MHz, PCIe Gen4 x16, 72 W); H100 SXM5 and H200 SXM (nvidia.com/en-us/
# data-center/h100, /h200: 80 GB HBM3 3.35 TB/s; 141 GB HBM3e 4.8 TB/s; 989 TFLOPS bf16 dense, boost
# 1,980 MHz, PCIe Gen5 x16); A100 80GB SXM4 (nvidia.com/en-us/data-center/a100: HBM2e 2,039 GB/s, 312
# TFLOPS bf16 dense, boost 1,410 MHz, PCIe Gen4 x16); GB10 / DGX Spark (nvidia.com/en-us/products/
# workstations/dgx-spark: 128 GB unified LPDDR5x at 273 GB/s, 1 PFLOP FP4 with sparsity). GB10's bf16
# dense figure is derived, not quoted: FP4 sparse / 2 (dense) / 8 (FP4 -> bf16 on consumer-class
# Blackwell tensor cores, as on the RTX 50 series datasheet) = 62.5 TFLOPS.
# Host links: PCIe Gen4 x16 is 32 GB/s raw, ~25 GB/s achieved for pinned copies; Gen5 x16 64 raw, ~50
# achieved. GB10's host tier lives in the same LPDDR5x, so a copy reads and writes one memory: 273 / 2.
# Sustained clocks (assumptions, no published figure; eta_c absorbs their error at the default clock):
# a 72 W L4 power-caps to ~1.5 GHz under tensor load, H100/H200 settle near 1.75 GHz at 700 W, A100
# holds 1.41 GHz, GB10 is taken at its nominal clock.
CARDS: dict[str, Card] = {
    "l4": Card("l4", "NVIDIA L4", 24.0, 22.49, 300.0, 121.0, 2040, 1500, 25.0, 64.0),
    "h100": Card("h100", "NVIDIA H100 SXM5", 80.0, 79.1, 3350.0, 989.0, 1980, 1755, 50.0, 256.0),
    "h200": Card("h200", "NVIDIA H200 SXM", 141.0, 139.8, 4800.0, 989.0, 1980, 1755, 50.0, 256.0),
    "a100-80g": Card("a100-80g", "NVIDIA A100 80GB SXM4", 80.0, 79.2, 2039.0, 312.0, 1410, 1410, 25.0, 128.0),
    "gb10": Card(
        "gb10", "NVIDIA GB10 (DGX Spark)", 128.0, 119.7, 273.0, 62.5, 2500, 2500, 136.5, 128.0, True
    ),
}
# today's profile names, kept as aliases: a card, with the model from --model-path (default Llama-3.1-8B)
ALIASES = {"l4-8b": "l4", "h200-8b": "h200", "h100-8b": "h100", "a100-8b": "a100-80g", "gb10-8b": "gb10"}


@dataclass(frozen=True)
class Measurement:
    """One public measurement of a real card, reduced to what the model predicts: bytes or FLOPs per step."""

    card: str
    what: str
    source: str
    measured_s: float  # seconds per decode step, or per prefill forward
    work: float  # decode: bytes read per step; prefill: FLOPs per forward
    kind: str  # "decode" or "prefill"
    layers: int = 32  # the model's layers: a prefill forward pays PREFILL_PER_LAYER_S for each
    batch: int = 1  # decode: sequences in the step (each pays DECODE_PER_SEQ_S)


def _measurements() -> list[Measurement]:
    """The points eta_bw and eta_c are fitted to (each with its source); bytes and FLOPs from the shapes."""
    from harness.sim.models import ModelShape, load_model

    llama = load_model("Llama-3.1-8B-Instruct")
    qwen3 = load_model("Qwen3-8B")
    assert llama is not None and qwen3 is not None
    qwen25 = ModelShape("Qwen2.5-7B", 28, 3584, 28, 4, 128, 18944, 152064)  # its config.json
    fp8_llama = (
        llama.layers * (llama.attn_params_per_layer + llama.mlp_params_per_layer) + llama.lm_head_params * 2
    )
    out = [
        Measurement(
            "l4",
            "Qwen2.5-7B bf16, batch-1 decode at 2,048 context: 62.32 ms/step",
            "J. Chen, Memory-Bound but Not Bandwidth-Limited, arXiv:2605.30571 (2026)",
            0.06232,
            qwen25.step_weight_bytes(1) + 2048 * qwen25.kv_bytes_per_token,
            "decode",
        ),
        Measurement(
            "h100",
            "Llama-3.1-8B bf16, batch-1 decode with CUDA graphs: 5.1 ms/step",
            "cloudai.pt, CUDA Graphs + torch.compile: 1.65x LLM Decode Speedup (2026)",
            0.0051,
            llama.step_weight_bytes(1),
            "decode",
        ),
        Measurement(
            "gb10",
            "Llama-3.1-8B FP8 weights, batch-1 decode at ISL 2,048: 20.5 tok/s",
            "NVIDIA, How DGX Spark Performance Enables Intensive AI Tasks (developer.nvidia.com), via the"
            " 2026-05-24 DGX Spark throughput compilation (site-one-liart-13.vercel.app)",
            1 / 20.5,
            fp8_llama + 2048 * llama.kv_bytes_per_token,
            "decode",
        ),
        Measurement(
            "gb10",
            "Qwen3-8B bf16, batch-1 decode (vLLM): 13.1 tok/s",
            "lyb.re, 50+ tokens per second on a desktop: running LLMs on the NVIDIA DGX Spark (2026-03-10)",
            1 / 13.1,
            qwen3.step_weight_bytes(1),
            "decode",
        ),
        Measurement(
            "l4",
            "Qwen3-8B bf16, SGLang prefill batch of 4,096 new tokens (3 sequences, 0 cached) back to"
            " back with the next chunk: 1,573.58 token/s",
            "SGLang server log of the seed's real L4 serving Qwen3-8B (docs/sglang-facts.md, 2026-10-17 17:34:02)",
            4096 / 1573.58,
            _prefill_flops(qwen3, [(1366, 0), (1365, 0), (1365, 0)]),
            "prefill",
            qwen3.layers,
        ),
        Measurement(
            "l4",
            "Qwen3-8B bf16, SGLang prefill batch of 4,096 new tokens after 2,196 cached (4 sequences):"
            " 1,431.87 token/s",
            "SGLang server log of the seed's real L4 serving Qwen3-8B (docs/sglang-facts.md, 2026-10-17 18:19:03)",
            4096 / 1431.87,
            _prefill_flops(qwen3, [(1024, 549)] * 4),
            "prefill",
            qwen3.layers,
        ),
        Measurement(
            "h100",
            "Llama-3.1-8B-Instruct bf16, SGLang bench_serving, 1,000 random 8,192-token prompts, 8 output"
            " tokens: 27,670 input token/s (one 8,192-token chunk per forward)",
            "github.com/sgl-project/sglang/pull/1060 (2024-08-13)",
            8192 / 27670.26,
            _prefill_flops(llama, [(8192, 0)]),
            "prefill",
        ),
    ]
    return out


def held_out() -> list[Measurement]:
    """Public measurements the fit does not use: checks of the fitted model on cards and regimes the fit
    has no point for (harness.advise.physics_error sets them beside it; docs/physics.md)."""
    from harness.sim.models import load_model

    llama = load_model("Llama-3.1-8B-Instruct")
    assert llama is not None
    return [
        Measurement(
            "h200",
            "Llama-3.1-8B bf16, vLLM latency test, batch of 8, 32 input + 128 output tokens each: 833.421 ms"
            " end to end (a step per output token, the first a prefill of 256 tokens)",
            "vLLM performance benchmark, buildkite.com/vllm/performance-benchmark/builds/9515"
            " (latency_llama8B_tp1, H200)",
            0.833421 / 128,
            llama.step_weight_bytes(8) + 8 * (32 + 64) * llama.kv_bytes_per_token,  # the mean context
            "decode",
            batch=8,
        ),
    ]


def _prefill_flops(shape, parts: list[tuple[int, int]]) -> float:
    """FLOPs of one prefill forward over (new tokens, cached before) per sequence."""
    total = 0.0
    for n, c in parts:
        total += n * shape.linear_flops_per_token + shape.lm_head_flops
        total += shape.attn_flops_per_ctx_token * (n * c + n * (n + 1) / 2)
    return total


# Fixed costs the fit does not absorb (assumptions, stated once): a decode step pays ~15 us per running
# sequence (sampling, metadata, CUDA-graph padding); a prefill forward pays a launch cost per layer
# (eager kernels, ~10 per layer at ~8 us).
DECODE_PER_SEQ_S = 15e-6
PREFILL_PER_LAYER_S = 80e-6


def fit_efficiencies() -> tuple[float, float, list[tuple[Measurement, float]]]:
    """(eta_bw, eta_c, [(measurement, the efficiency it alone implies)]): each fitted value is the
    geometric mean over its points, i.e. the least-squares fit of log(predicted / measured)."""
    import math

    per: list[tuple[Measurement, float]] = []
    for m in _measurements():
        card = CARDS[m.card]
        if m.kind == "decode":
            eff = m.work / (card.bw_gb_s * 1e9 * (m.measured_s - m.batch * DECODE_PER_SEQ_S))
        else:
            peak = card.bf16_tflops * 1e12 * card.sm_typical_mhz / card.sm_max_mhz
            eff = m.work / (peak * (m.measured_s - m.layers * PREFILL_PER_LAYER_S))
        per.append((m, eff))

    def gmean(kind: str) -> float:
        vals = [e for m, e in per if m.kind == kind]
        return math.exp(sum(math.log(v) for v in vals) / len(vals))

    return gmean("decode"), gmean("prefill"), per


ETA_BW, ETA_C, FIT_POINTS = fit_efficiencies()
