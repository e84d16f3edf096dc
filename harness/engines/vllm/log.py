"""vLLM's log lines (V0, V1, up to 0.32) → LogRecords: stats with the prefix-cache hit rate, engine, KV size,
resets."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from harness.serverlog.records import LogRecord, slug

# its own kinds of record (the shared ones: harness.serverlog.records.KINDS)
KINDS = ("vllm_engine", "vllm_stats")
# vLLM's logger: `[(Proc pid=N) ]LEVEL MM-DD HH:MM:SS [file.py:N] message` (V0 has `file.py:N]`).
PREFIX = re.compile(
    r"^(?:\((?P<proc>[^()]*)\)\s+)?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?P<md>\d{2}-\d{2})\s+(?P<hms>\d{2}:\d{2}:\d{2})(?:\.\d+)?\s+\[?[\w./-]+\.py:\d+\]\s?(?P<msg>.*)$"
)
_VLLM_ENGINE = re.compile(r"^Initializing an? (?:(?P<gen>V\d) )?LLM engine \(v(?P<version>[^)\s]+)\)")
_VLLM_KV_SIZE = re.compile(
    r"^(?:(?P<device>\w+) )?KV cache size: (?P<tokens>[\d,]+) tokens"
    r"(?:, Maximum concurrency for (?P<per>[\d,]+) tokens per request: (?P<conc>[\d.]+)x)?"
)
_VLLM_V0_HIT = re.compile(r"^Prefix cache hit rate: GPU: (?P<gpu>[\d.]+)%, CPU: (?P<cpu>[\d.]+)%")
_VLLM_RESET_REFUSED = re.compile(r"^Failed to reset prefix cache because some blocks \((?P<blocks>\d+)\)")
_VLLM_ITEM = re.compile(
    r"^(?P<label>[A-Za-z][A-Za-z ]*?): (?P<value>-?[\d.]+)\s*(?P<unit>%|tokens/s|reqs)?\.?$"
)
_VLLM_KEYS = {
    "Avg prompt throughput": "prompt_throughput",
    "Avg generation throughput": "generation_throughput",
    "Running": "running",
    "Waiting": "waiting",
    "Swapped": "swapped",
    "Pending": "pending",
    "Deferred": "deferred",
    "Preemptions": "preemptions",
    "Prefix cache hit rate": "prefix_cache_hit_rate",
    "External prefix cache hit rate": "external_prefix_cache_hit_rate",
    "MM cache hit rate": "mm_cache_hit_rate",
}


def _vllm_wall(md: str, hms: str, now: datetime | None = None) -> float:
    """`12-01 08:47:56` (no year) → epoch s, in the most recent year that does not put it in the future."""
    now = now or datetime.now()
    month, day = int(md[:2]), int(md[3:])
    h, mi, sec = int(hms[:2]), int(hms[3:5]), int(hms[6:8])
    for year in (now.year, now.year - 1):
        try:
            dt = datetime(year, month, day, h, mi, sec)
        except ValueError:  # 02-29 in a year without it
            continue
        if dt.timestamp() <= now.timestamp() + 86400:
            return dt.timestamp()
    raise ValueError(f"no year fits {md} {hms}")


def _vllm_stats(msg: str) -> dict[str, Any] | None:
    """`Engine 000: Avg prompt throughput: 781.9 tokens/s, ..., Prefix cache hit rate: 65.4%` → fields."""
    engine = None
    if msg.startswith("Engine "):
        head, _, msg = msg.partition(": ")
        engine = int(head[len("Engine ") :]) if head[len("Engine ") :].isdigit() else None
    if not msg.startswith("Avg prompt throughput:"):
        return None
    fields: dict[str, Any] = {"engine": engine}
    for item in msg.rstrip(".").split(", "):
        m = _VLLM_ITEM.match(item.strip())
        if not m:
            continue
        label, value = m.group("label"), float(m.group("value"))
        if label.endswith("KV cache usage"):  # "GPU KV cache usage", "CPU KV cache usage" (V0 has both)
            device = label[: -len(" KV cache usage")].strip() or None
            key = (
                "kv_cache_usage"
                if "kv_cache_usage" not in fields
                else f"{(device or '').lower()}_kv_cache_usage"
            )
            fields[key] = value
            fields.setdefault("kv_device", device)
            continue
        key = _VLLM_KEYS.get(label, slug(label))
        fields[key] = int(value) if m.group("unit") == "reqs" else value
    return fields


def _vllm_message(msg: str) -> tuple[str, dict[str, Any]] | None:
    stats = _vllm_stats(msg)
    if stats is not None:
        return "vllm_stats", stats
    m = _VLLM_V0_HIT.match(msg)
    if m:  # V0 prints the hit rate on a line of its own, just after the stats line
        return "vllm_stats", {
            "prefix_cache_hit_rate": float(m.group("gpu")),
            "cpu_prefix_cache_hit_rate": float(m.group("cpu")),
        }
    if msg.startswith("Successfully reset prefix cache"):
        return "flush", {}
    m = _VLLM_RESET_REFUSED.match(msg)
    if m:
        return "flush_refused", {"blocks": int(m.group("blocks"))}
    m = _VLLM_ENGINE.match(msg)
    if m:
        return "vllm_engine", {"version": m.group("version"), "generation": m.group("gen") or "V0"}
    m = _VLLM_KV_SIZE.match(msg)
    if m:
        fields: dict[str, Any] = {
            "tokens": int(m.group("tokens").replace(",", "")),
            "label": m.group("device"),
        }
        fields["how"] = "KV cache size"
        if m.group("conc"):
            fields["max_concurrency"] = float(m.group("conc"))
            fields["per_request_tokens"] = int(m.group("per").replace(",", ""))
        return "kv_pool", fields
    return None


def record(m: re.Match[str], line: str, lineno: int) -> LogRecord | None:
    """A line PREFIX matched → a LogRecord, or None when its message is none of the known kinds."""
    parsed = _vllm_message(m.group("msg").strip())
    if parsed is None:
        return None
    proc = f"({m.group('proc')})" if m.group("proc") else None
    return LogRecord(
        parsed[0], _vllm_wall(m.group("md"), m.group("hms")), parsed[1], line, lineno, False, {}, proc
    )
