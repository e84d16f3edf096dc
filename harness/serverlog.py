"""SGLang server log lines → typed records, so cache evidence does not depend on client timing.

Every variant in ../shared/reference/sglang.md is accepted (0.4.10 to 0.5.23): prefill and decode
batch lines, KV and host pool lines, the scheduler's `max_total_num_tokens=` line, ready, flush and
HiCache prefetch lines. Lines nothing matches are counted, never fatal. Log timestamps carry no
time zone: they are read as local time of the machine parsing them (the server's, in a capture).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

# Kinds of record, in the order a server usually prints them.
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

_PREFIX = re.compile(
    r"^(?:(?P<proc>\([^()]*\))\s*)?"
    r"\[(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?)(?P<tags>(?:\s+[A-Z_]+\d+)*)\]\s?"
    r"(?P<msg>.*)$"
)
_TAG = re.compile(r"([A-Z_]+?)(\d+)$")
_BATCH = re.compile(r"^(?P<kind>Prefill|Decode) batch(?:\s*\[(?P<iter>\d+)\])?\s*[.,]?\s*(?P<rest>.*)$")
_PAIR = re.compile(r"\s*([^:,]+?):\s*([^,]*)")
_KV_POOL = re.compile(
    r"^(?P<label>.*?)\bKV [Cc]ache (?P<how>is allocated|allocated|VA upper bound)\b[.:,]?\s*(?P<rest>.*)$"
)
_HOST_OLD = re.compile(r"Allocating (?P<gb>[\d.]+) GB host memory for hierarchical KV cache")
_HOST_NEW = re.compile(
    r"Allocating (?P<label>.*?)\s*hierarchical KV host pool:\s*(?P<tokens>\d+) tokens,\s*(?P<gb>[\d.]+) GB"
)
_KEYVAL = re.compile(r"(\w+)=([^,\s]+)")
_FLUSH_REFUSED = re.compile(r"Cache not flushed because there are pending requests\.?(?P<rest>.*)$")
_PREFETCH = re.compile(r"HiCache prefetch (?P<outcome>\w+)\b(?P<rest>.*)$")
_SIZE_GB = re.compile(r"^([\d.]+)\s*GB$")

# Canonical names of the batch-line fields; anything else becomes a slug of its label.
_KEYS = {
    "#new-seq": "new_seq",
    "#new-token": "new_token",
    "#cached-token": "cached_token",
    "#running-req": "running_req",
    "#queue-req": "queue_req",
    "#pending-token": "pending_token",
    "#replay-token": "replay_token",
    "#token": "token",
    "#tokens": "tokens",
    "token usage": "token_usage",
    "full token usage": "full_token_usage",
    "swa token usage": "swa_token_usage",
    "mamba usage": "mamba_usage",
    "input throughput (token/s)": "input_throughput",
    "gen throughput (token/s)": "gen_throughput",
    "est. prefill TFLOPS/s (per GPU)": "est_prefill_tflops",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
    "K size": "k_size_gb",
    "V size": "v_size_gb",
    "KV size": "kv_size_gb",
}


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


def _value(text: str) -> Any:
    t = text.strip()
    if t in ("True", "False"):
        return t == "True"
    if t == "None":
        return None
    m = _SIZE_GB.match(t)
    if m:
        t = m.group(1)
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def _slug(label: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", label.lower()).strip("_")


def _pairs(rest: str) -> dict[str, Any]:
    """`#new-seq: 1, token usage: 0.01, cuda graph: True, ` → canonical fields (graph word kept apart)."""
    out: dict[str, Any] = {}
    for m in _PAIR.finditer(rest):
        label, raw = m.group(1).strip(), m.group(2)
        if not label:
            continue
        if label.endswith(" graph") and " " not in label[: -len(" graph")]:
            out["graph"] = _value(raw)
            out["graph_kind"] = label[: -len(" graph")]
            continue
        out[_KEYS.get(label, _slug(label))] = _value(raw)
    return out


def _wall(ts: str) -> tuple[float, bool]:
    """`2026-10-17 18:19:03[.123]` as local time → epoch seconds, and whether it had sub-seconds."""
    frac = 0.0
    ms = len(ts) > 19
    if ms:
        frac = float("0." + ts[20:])
    dt = datetime(int(ts[0:4]), int(ts[5:7]), int(ts[8:10]), int(ts[11:13]), int(ts[14:16]), int(ts[17:19]))
    return dt.timestamp() + frac, ms


def _message(msg: str) -> tuple[str, dict[str, Any], int | None] | None:
    """The kind, fields and forward iteration of one log message (the part after the prefix)."""
    m = _BATCH.match(msg)
    if m:
        it = int(m.group("iter")) if m.group("iter") else None
        return m.group("kind").lower(), _pairs(m.group("rest")), it
    if "KV" in msg and ("ache" in msg):
        m = _KV_POOL.match(msg)
        if m:
            fields = _pairs(m.group("rest"))
            label = m.group("label").strip().rstrip(":").strip()
            fields["label"] = label or None
            fields["how"] = m.group("how")
            return "kv_pool", fields, None
    if msg.startswith("Allocating"):
        m = _HOST_NEW.search(msg)
        if m:
            label = m.group("label").strip() or None
            return (
                "host_pool",
                {"tokens": int(m.group("tokens")), "gb": float(m.group("gb")), "label": label},
                None,
            )
        m = _HOST_OLD.search(msg)
        if m:
            return "host_pool", {"tokens": None, "gb": float(m.group("gb")), "label": None}, None
    if msg.startswith("max_total_num_tokens="):
        return "scheduler", {k: _value(v) for k, v in _KEYVAL.findall(msg)}, None
    if "The server is fired up and ready to roll" in msg:
        return "ready", {}, None
    if msg.startswith("Cache flushed successfully"):
        return "flush", {}, None
    m = _FLUSH_REFUSED.match(msg)
    if m:
        return "flush_refused", _pairs(m.group("rest")), None
    m = _PREFETCH.match(msg)
    if m:
        fields: dict[str, Any] = {k: _value(v) for k, v in _KEYVAL.findall(m.group("rest"))}
        fields["outcome"] = m.group("outcome")
        return "hicache_prefetch", fields, None
    return None


def parse_line(line: str, lineno: int = 0) -> LogRecord | None:
    """One log line → a LogRecord, or None when it is none of the known kinds."""
    try:
        return _parse_line(line, lineno)
    except (ValueError, OverflowError):  # a known shape holding junk (e.g. a 5000-digit number): unknown
        return None


def _parse_line(line: str, lineno: int) -> LogRecord | None:
    line = line.rstrip("\r\n")
    m = _PREFIX.match(line)
    wall: float | None = None
    ms = False
    ranks: dict[str, int] = {}
    proc: str | None = None
    msg = line.strip()
    if m:
        try:
            wall, ms = _wall(m.group("ts"))
        except ValueError:
            wall = None
        for tag in m.group("tags").split():
            t = _TAG.match(tag)
            if t:
                ranks[t.group(1)] = int(t.group(2))
        proc = m.group("proc")
        msg = m.group("msg").strip()
    parsed = _message(msg)
    if parsed is None:
        return None
    kind, fields, it = parsed
    return LogRecord(kind, wall, fields, line, lineno, ms, ranks, proc, it)


@dataclass
class ParsedLog:
    """All records of one log, with the count of lines nothing recognised."""

    path: str | None
    records: list[LogRecord]
    lines: int = 0
    unknown: int = 0
    undecodable: int = 0  # lines with bytes that are not UTF-8 (replaced, still parsed)

    def of(self, kind: str) -> list[LogRecord]:
        return [r for r in self.records if r.kind == kind]

    def counts(self) -> dict[str, int]:
        c = Counter(r.kind for r in self.records)
        out = {k: c[k] for k in KINDS if c[k]}
        out["unknown"] = self.unknown
        return out


def parse_lines(lines: Iterable[str], path: str | None = None) -> ParsedLog:
    log = ParsedLog(path, [])
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


def pool_sizes(records: Iterable[LogRecord]) -> dict[str, Any]:
    """Device and host pool sizes the server reported (the last value of each wins: post-capture resizes)."""
    out: dict[str, Any] = {
        "device_tokens": None,
        "max_total_num_tokens": None,
        "host_tokens": None,
        "host_gb": None,
        "kv_pools": {},
    }
    for r in records:
        if r.kind == "kv_pool" and isinstance(r.fields.get("tokens"), int):
            label = r.fields.get("label") or ""
            out["kv_pools"][label] = r.fields["tokens"]
            if r.fields.get("how") != "VA upper bound":
                out["device_tokens"] = r.fields["tokens"]
        elif r.kind == "scheduler" and isinstance(r.fields.get("max_total_num_tokens"), int):
            out["max_total_num_tokens"] = r.fields["max_total_num_tokens"]
        elif r.kind == "host_pool":
            out["host_gb"] = r.fields.get("gb")
            if r.fields.get("tokens") is not None:
                out["host_tokens"] = r.fields["tokens"]
    return out


def prefill_totals(records: Iterable[LogRecord]) -> dict[str, Any]:
    """Sums over prefill lines: new and cached tokens, and the hit rate cached / (cached + new)."""
    new = cached = n = 0
    for r in records:
        if r.kind != "prefill":
            continue
        n += 1
        new += token_count(r.fields.get("new_token"))
        cached += token_count(r.fields.get("cached_token"))
    total = new + cached
    return {
        "prefill_lines": n,
        "new_tokens": new,
        "cached_tokens": cached,
        "hit_rate": (cached / total) if total else None,
    }


def token_count(v: Any) -> int:
    """A token count from a log field; text where a number belongs (a garbled line) counts as 0."""
    try:
        return int(v or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def in_window(
    records: Iterable[LogRecord], start: float, end: float, slack_s: float = 1.0
) -> Iterator[LogRecord]:
    """Records stamped within [start - slack, end + slack]: 1 s log resolution needs the slack."""
    lo, hi = start - slack_s, end + slack_s
    for r in records:
        if r.wall is not None and lo <= r.wall <= hi:
            yield r
