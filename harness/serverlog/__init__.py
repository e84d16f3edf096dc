"""SGLang and vLLM server log lines → typed records, so cache evidence does not depend on client timing.

Every SGLang variant in docs/sglang-facts.md is accepted (0.4.10 to 0.5.23): prefill and decode
batch lines, KV and host pool lines, the scheduler's `max_total_num_tokens=` line, ready, flush and
HiCache prefetch lines. vLLM's lines (V0 and V1 up to 0.32): the periodic stats line with its
`Prefix cache hit rate: X%`, the engine version, the KV cache size, and prefix-cache resets; the
cumulative hit rate becomes per-point figures in `vllm_point_hit_rate`. Lines nothing matches are
counted, never fatal. Log timestamps carry no time zone: they are read as local time of the machine
parsing them (the server's, in a capture); vLLM's carry no year either (the most recent past one).

Modules: `records` (LogRecord, ParsedLog), `sglang` and `vllm` (one dialect's lines each), `parse`
(which dialect, whole files), `totals` (pool sizes, prefill sums, a point's window), `vllm_hit_rate`
(a point's figure from vLLM's cumulative lines). The names below are the package's public API.
"""

from harness.serverlog.parse import parse_file, parse_line, parse_lines
from harness.serverlog.records import KINDS, LogRecord, ParsedLog
from harness.serverlog.totals import in_window, pool_sizes, prefill_totals, token_count
from harness.serverlog.vllm_hit_rate import (
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
    "KINDS",
    "ROUNDING_RATE",
    "ROUNDING_THROUGHPUT",
    "LogHitRate",
    "LogRecord",
    "ParsedLog",
    "in_window",
    "parse_file",
    "parse_line",
    "parse_lines",
    "pool_sizes",
    "prefill_totals",
    "token_count",
    "vllm_point_hit_rate",
    "vllm_stats_lines",
    "vllm_throughput_counts",
]
