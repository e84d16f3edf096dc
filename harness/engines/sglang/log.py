"""SGLang's log lines (0.4.10 to 0.5.23, and serve-sim's, which are shaped like them) → LogRecords."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from harness.serverlog.records import LogRecord, slug

# its own kinds of record, serve-sim's lines (the shared ones: harness.serverlog.records.KINDS)
KINDS = ("sim_request", "sim_overhead")
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
_SIM_OVERHEAD = re.compile(r"^serve-sim: wall-clock overhead (?P<pct>[\d.]+)% of the modelled step time")
_SIM_REQUEST = "Sim request finished, "

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
        out[_KEYS.get(label, slug(label))] = _value(raw)
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
    if msg.startswith(_SIM_REQUEST):  # serve-sim: one finished request's virtual stamps
        return "sim_request", _pairs(msg[len(_SIM_REQUEST) :]), None
    m = _SIM_OVERHEAD.match(msg)
    if m:  # serve-sim: wall-clock overhead beyond what --time-scale gives the forwards
        return "sim_overhead", {"fraction": float(m.group("pct")) / 100}, None
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
    if "The server is fired up and ready to roll" in msg or msg == "INFO:     Application startup complete.":
        return "ready", {}, None
    if msg.startswith("Cache flushed successfully"):
        return "flush", {}, None
    m = _FLUSH_REFUSED.match(msg)
    if m:
        return "flush_refused", _pairs(m.group("rest")), None
    m = _PREFETCH.match(msg)
    if m:
        fields = {k: _value(v) for k, v in _KEYVAL.findall(m.group("rest"))}
        fields["outcome"] = m.group("outcome")
        return "hicache_prefetch", fields, None
    return None


def record(line: str, lineno: int) -> LogRecord | None:
    """One line (no newline) with or without SGLang's `[time TP0]` prefix → a LogRecord, or None."""
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
