"""vLLM, in one place: its adapter (launch line, reset, metric names, settle wait), its CPU venv, its log
dialect and the point's hit rate from its cumulative stats lines, its counters and cache facts."""

from harness.engines.vllm.adapter import VLLM, VLLM_FLAGS, VLLM_RESET_PATH, vllm_python
from harness.engines.vllm.hit_rate import (
    COARSE_ABOVE,
    ROUNDING_RATE,
    ROUNDING_THROUGHPUT,
    LogHitRate,
    vllm_point_hit_rate,
    vllm_stats_lines,
    vllm_throughput_counts,
)

__all__ = [
    "COARSE_ABOVE",
    "ROUNDING_RATE",
    "ROUNDING_THROUGHPUT",
    "VLLM",
    "VLLM_FLAGS",
    "VLLM_RESET_PATH",
    "LogHitRate",
    "vllm_point_hit_rate",
    "vllm_python",
    "vllm_stats_lines",
    "vllm_throughput_counts",
]
