"""Which engine's dialect a log line is in (vLLM's prefix, else SGLang's), and whole logs read line by line."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from harness.engines.sglang import log as sglang
from harness.engines.vllm import log as vllm
from harness.serverlog.records import KINDS as SHARED_KINDS
from harness.serverlog.records import LogRecord, ParsedLog

DIALECTS = "SGLang or vLLM"  # the engines whose log lines are read, as messages name them
# every kind of record, in the order counts are written: the shared ones, then each dialect's own
KINDS: tuple[str, ...] = (*SHARED_KINDS, *vllm.KINDS, *sglang.KINDS)


def parse_line(line: str, lineno: int = 0) -> LogRecord | None:
    """One log line → a LogRecord, or None when it is none of the known kinds."""
    try:
        return _parse_line(line, lineno)
    except (ValueError, OverflowError):  # a known shape holding junk (e.g. a 5000-digit number): unknown
        return None


def _parse_line(line: str, lineno: int) -> LogRecord | None:
    line = line.rstrip("\r\n")
    v = vllm.PREFIX.match(line)
    if v:
        return vllm.record(v, line, lineno)
    return sglang.record(line, lineno)


def parse_lines(lines: Iterable[str], path: str | None = None) -> ParsedLog:
    log = ParsedLog(path, [], kinds=KINDS)
    for i, line in enumerate(lines, 1):
        log.lines += 1
        if "\ufffd" in line:
            log.undecodable += 1
        rec = parse_line(line, i)
        if rec is None:
            if line.strip():
                log.unknown += 1
        else:
            log.records.append(rec)
    return log


def parse_file(path: Path | str) -> ParsedLog:
    """Parse a whole log; bytes that are not UTF-8 are replaced so a binary tail never stops it."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_lines(f, str(path))
