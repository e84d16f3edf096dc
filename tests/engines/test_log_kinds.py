"""Each dialect declares its own kinds of record; a parsed log counts every kind in one order."""

from __future__ import annotations

from harness import serverlog
from harness.engines import logs
from harness.engines.sglang import log as sglang_log
from harness.engines.vllm import log as vllm_log
from harness.serverlog import LogRecord, ParsedLog


def test_the_shared_kinds_then_each_dialects_own():
    assert (*serverlog.KINDS, *vllm_log.KINDS, *sglang_log.KINDS) == logs.KINDS
    assert len(set(logs.KINDS)) == len(logs.KINDS)
    assert not any(k.startswith("vllm") for k in serverlog.KINDS)  # serverlog names no engine's own kind
    assert logs.parse_lines([]).kinds == logs.KINDS


def test_counts_are_written_in_that_order():
    recs = [LogRecord(k, None, {}, "") for k in ("sim_request", "vllm_stats", "prefill", "vllm_stats")]
    log = ParsedLog(None, recs, unknown=2, kinds=logs.KINDS)
    assert list(log.counts().items()) == [
        ("prefill", 1),
        ("vllm_stats", 2),
        ("sim_request", 1),
        ("unknown", 2),
    ]
