"""A point's hit rate from an engine whose log is read its own way rather than as SGLang's prefill lines:
vLLM's cumulative stats lines. summarize falls back to the prefill lines when this gives None."""

from __future__ import annotations

from typing import Any

from harness import serverlog
from harness.engines.vllm.log_figures import vllm_log_figures

# the log's hit rate in words (the report's sources note): SGLang's prefill lines, vLLM's stats lines
LOG_NOTE = (
    "log = #cached-token / (#cached-token + "
    "#new-token) of prefill lines in the point's window (SGLang), or vLLM's cumulative `Prefix cache "
    "hit rate` line after the point (since its reset, or differenced between the lines at its edges; "
    "coarse when the log's rounding moves it by more than 2 points)"
)


def engine_log_figures(
    log: serverlog.ParsedLog, window: tuple[float, float], shift: float, flushed: bool
) -> tuple[dict[str, Any], list[str]] | None:
    """The point's log figures (Figures' keys) and evidence lines, or None: read the prefill lines."""
    if log.of("vllm_stats"):
        return vllm_log_figures(log, window, shift, flushed)
    return None
