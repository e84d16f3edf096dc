"""SGLang and vLLM server log lines → typed records, so cache evidence does not depend on client timing.

Every SGLang variant in ../shared/reference/sglang.md is accepted (0.4.10 to 0.5.23): prefill and decode
batch lines, KV and host pool lines, the scheduler's `max_total_num_tokens=` line, ready, flush and
HiCache prefetch lines. vLLM's lines (V0 and V1 up to 0.32): the periodic stats line with its
`Prefix cache hit rate: X%`, the engine version, the KV cache size, and prefix-cache resets; the
cumulative hit rate becomes per-point figures in `vllm_point_hit_rate`. Lines nothing matches are
counted, never fatal. Log timestamps carry no time zone: they are read as local time of the machine
parsing them (the server's, in a capture); vLLM's carry no year either (the most recent past one).
"""

from __future__ import annotations

import itertools
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
    "vllm_engine",
    "vllm_stats",
    "sim_request",
    "sim_overhead",
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
        fields: dict[str, Any] = {k: _value(v) for k, v in _KEYVAL.findall(m.group("rest"))}
        fields["outcome"] = m.group("outcome")
        return "hicache_prefetch", fields, None
    return None


# vLLM's logger: `[(Proc pid=N) ]LEVEL MM-DD HH:MM:SS [file.py:N] message` (V0 has `file.py:N]`).
_VLLM_PREFIX = re.compile(
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
        key = _VLLM_KEYS.get(label, _slug(label))
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


def _vllm_record(m: re.Match[str], line: str, lineno: int) -> LogRecord | None:
    parsed = _vllm_message(m.group("msg").strip())
    if parsed is None:
        return None
    proc = f"({m.group('proc')})" if m.group("proc") else None
    return LogRecord(
        parsed[0], _vllm_wall(m.group("md"), m.group("hms")), parsed[1], line, lineno, False, {}, proc
    )


def parse_line(line: str, lineno: int = 0) -> LogRecord | None:
    """One log line → a LogRecord, or None when it is none of the known kinds."""
    try:
        return _parse_line(line, lineno)
    except (ValueError, OverflowError):  # a known shape holding junk (e.g. a 5000-digit number): unknown
        return None


def _parse_line(line: str, lineno: int) -> LogRecord | None:
    line = line.rstrip("\r\n")
    v = _VLLM_PREFIX.match(line)
    if v:
        return _vllm_record(v, line, lineno)
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


ROUNDING_RATE = 0.0005  # vLLM prints the hit rate with one decimal of a percent
ROUNDING_THROUGHPUT = 0.05  # ... and throughput with one decimal of tokens/s
COARSE_ABOVE = 0.02  # a log figure less certain than 2 points is flagged, not compared


@dataclass
class LogHitRate:
    """A point's hit rate read from vLLM's periodic stats lines, and how far it can be trusted."""

    hit_rate: float | None
    method: str  # "since-reset": the first line after the point, its reset restarted the figure
    #             "edge-delta": (hits, queries) rebuilt at the lines on the point's edges, differenced
    uncertainty: float | None = None  # ± on hit_rate from the log's rounding
    coarse: bool = False
    why: str | None = None
    start_line: int | None = None  # line numbers of the edge lines used
    end_line: int | None = None
    queries: float | None = None  # tokens the figure covers (edge-delta: estimated)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def vllm_stats_lines(records: Iterable[LogRecord]) -> list[LogRecord]:
    """Stats records carrying a hit rate, in file order; V0's separate hit-rate line is merged into its stats."""
    out: list[LogRecord] = []
    for r in records:
        if r.kind != "vllm_stats":
            continue
        if "prompt_throughput" not in r.fields and out and "prefix_cache_hit_rate" not in out[-1].fields:
            out[-1] = LogRecord(
                r.kind, out[-1].wall, {**out[-1].fields, **r.fields}, out[-1].line, out[-1].lineno
            )
            continue
        out.append(r)
    return [r for r in out if isinstance(r.fields.get("prefix_cache_hit_rate"), float)]


def vllm_throughput_counts(version: str | None) -> str:
    """What vLLM's `Avg prompt throughput` counts: computed tokens only (0.32 and later), else whole prompts."""
    try:
        major, minor = (int(x) for x in (version or "").split(".")[:2])
    except ValueError:
        return "computed"  # unknown: assume the newest behaviour
    return "computed" if (major, minor) >= (0, 32) else "prompt"


def vllm_point_hit_rate(
    records: Iterable[LogRecord],
    start_wall: float,
    end_wall: float,
    *,
    reset_lineno: int | None = None,
    next_reset_lineno: int | None = None,
    interval_s: float = 10.0,
    throughput_counts: str = "computed",
) -> LogHitRate:
    """The point's hit rate from vLLM's cumulative `Prefix cache hit rate: X%` lines.

    vLLM prints the hit rate over the requests since its last prefix-cache reset (the most recent 1000 at
    most) every `interval_s` (VLLM_LOG_STATS_INTERVAL), and stays silent while idle, except for the first
    idle line, which comes at least one interval after the load's end (the runner waits for it). When the point
    reset the cache (`reset_lineno`, the line of its own reset), the first stats line stamped after the
    point's end (its last request's completion) and before the next reset is the point's own figure. Otherwise the figure is rebuilt at
    the last line before the point and the first line after it: queries Q and hits H since the last reset
    from the printed rate r and the integrated prompt throughput C (Q = C / (1 - r) when throughput counts
    computed tokens, Q = C when it counts whole prompts), then (H_end - H_start) / (Q_end - Q_start).
    Flagged coarse when no line lies after the point, the edges straddle a reset, or rounding alone moves
    the figure by more than 2 points.
    """
    records = list(records)
    lines = vllm_stats_lines(records)
    stop = next_reset_lineno if next_reset_lineno is not None else float("inf")
    # stamped S means printed in [S, S + 1): only a line stamped at or after the end surely follows it.
    # `Running: 0 reqs` proves nothing: between a batch's completions and the client's next sends a
    # busy engine shows 0 running too (seen on 0.32: a line mid-load at 22.9 % of a 76.3 % point).
    after = [r for r in lines if r.wall is not None and r.wall >= end_wall and r.lineno < stop]
    if reset_lineno is not None:
        after = [r for r in after if r.lineno > reset_lineno]
    if not after:
        return LogHitRate(
            None,
            "since-reset" if reset_lineno is not None else "edge-delta",
            coarse=True,
            why=f"no stats line between the point's end and the next reset (vLLM logs every {interval_s:g} s)",
        )
    end = after[0]
    if reset_lineno is not None:
        return LogHitRate(
            end.fields["prefix_cache_hit_rate"] / 100.0,
            "since-reset",
            ROUNDING_RATE,
            False,
            None,
            reset_lineno,
            end.lineno,
        )
    return _edge_delta(lines, records, end, start_wall, interval_s, throughput_counts)


def _edge_delta(
    lines: list[LogRecord],
    records: list[LogRecord],
    end: LogRecord,
    start_wall: float,
    interval_s: float,
    counts: str,
) -> LogHitRate:
    resets = [r.lineno for r in records if r.kind == "flush"]

    def epoch(lineno: int) -> int:  # the line of the last reset before `lineno` (0: server start)
        return max((x for x in resets if x < lineno), default=0)

    # a line stamped S was printed in [S, S + 1): before the point only if S + 1 <= start
    before = [r for r in lines if r.wall is not None and r.wall + 1.0 <= start_wall and r.lineno < end.lineno]
    start = before[-1] if before else None
    if start is not None and epoch(start.lineno) != epoch(end.lineno):
        start = None  # a reset between the edges: the figure restarted, count from that reset
    first = epoch(end.lineno)

    def state(upto: LogRecord | None, dr: float, dc: float) -> tuple[float, float]:
        if upto is None:
            return 0.0, 0.0
        span = [r for r in lines if first < r.lineno <= upto.lineno]
        c = sum(float(r.fields.get("prompt_throughput") or 0.0) for r in span) * interval_s
        c = max(0.0, c + dc * len(span) * ROUNDING_THROUGHPUT * interval_s)
        rate = min(1.0, max(0.0, upto.fields["prefix_cache_hit_rate"] / 100.0 + dr))
        if counts == "prompt":
            return c, rate * c
        if rate >= 1.0:
            return float("inf"), float("inf")
        q = c / (1.0 - rate)
        return q, q - c

    def figure(dr_s: float, dr_e: float, dc_s: float, dc_e: float) -> tuple[float | None, float]:
        qs, hs = state(start, dr_s, dc_s)
        qe, he = state(end, dr_e, dc_e)
        dq = qe - qs
        if not dq > 0 or dq == float("inf"):
            return None, dq
        return (he - hs) / dq, dq

    base, dq = figure(0.0, 0.0, 0.0, 0.0)
    res = LogHitRate(None, "edge-delta", start_line=start.lineno if start else None, end_line=end.lineno)
    if base is None:
        res.coarse, res.why = True, "no prompt tokens between the edge lines (or a 100% rate hides them)"
        return res
    spread = 0.0
    for signs in itertools.product((-1.0, 1.0), repeat=4):
        v, _ = figure(*(s * ROUNDING_RATE if i < 2 else s for i, s in enumerate(signs)))
        spread = max(spread, abs(v - base) if v is not None else 1.0)
    res.hit_rate, res.uncertainty, res.queries = min(1.0, max(0.0, base)), spread, round(dq, 1)
    if spread > COARSE_ABOVE:
        res.coarse = True
        res.why = f"the log's rounding moves this figure by up to {100 * spread:.1f} points"
    return res
