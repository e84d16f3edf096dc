"""The records a server log becomes: one LogRecord per recognised line, a ParsedLog per file."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

# Kinds of record the engine-agnostic readers know, in the order a server usually prints them. A kind of
# one engine's own is declared by its dialect (harness.engines.<engine>.log KINDS); harness.engines.logs.KINDS
# is all of them, in the order counts are written.
KINDS = (
    "kv_pool",
    "host_pool",
    "scheduler",
    "ready",
    "prefill",
    "decode",
    "flush",
    "flush_refused",
    "hicache_prefetch",
)


@dataclass
class LogRecord:
    """One recognised log line: its kind, wall time (epoch s, None without a timestamp) and fields."""

    kind: str
    wall: float | None
    fields: dict[str, Any]
    line: str  # verbatim, without the newline
    lineno: int = 0
    ms: bool = False  # the timestamp had sub-second digits
    ranks: dict[str, int] = field(default_factory=dict)  # e.g. {"TP": 0}
    process: str | None = None  # e.g. "(SchedulerActor pid=123, ip=10.0.0.1)"
    iter: int | None = None  # SGLANG_LOG_FORWARD_ITERS=1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ParsedLog:
    """All records of one log, with the count of lines nothing recognised."""

    path: str | None
    records: list[LogRecord]
    lines: int = 0
    unknown: int = 0
    undecodable: int = 0  # lines with bytes that are not UTF-8 (replaced, still parsed)
    kinds: tuple[str, ...] = KINDS  # the kinds counted, in order (harness.engines.logs: every dialect's)

    def of(self, kind: str) -> list[LogRecord]:
        return [r for r in self.records if r.kind == kind]

    def counts(self) -> dict[str, int]:
        c = Counter(r.kind for r in self.records)
        out = {k: c[k] for k in self.kinds if c[k]}
        out["unknown"] = self.unknown
        return out


def slug(label: str) -> str:
    """A field name for a label no table names: `Foo Bar (x/s)` → `foo_bar_x_s`."""
    return re.sub(r"[^0-9a-z]+", "_", label.lower()).strip("_")
