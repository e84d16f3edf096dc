"""What every report writer needs: the summary loaded and checked, cell wording, server labels.

Server labels (policy, pool, time scale, card) come from the manifest's args, else server_info.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.engines import ADAPTERS
from harness.summary import Point, Server, Summary
from harness.summary import load_summary as read_summary
from harness.verdicts import stored_verdict, verdict_cell, verdict_word

__all__ = ["verdict_cell", "verdict_word"]  # re-exported: the report's modules take them from here


def load_summary(path: Path | str) -> Summary:
    """Read a summary through its types (schema 1 or 2); anything else is a one-line error (exit 2).

    A schema-1 file, written before the verdict line was stored, gets it here, once (harness.verdicts).
    """
    summary = read_summary(path)
    stored_verdict(summary)
    return summary


# ---------------------------------------------------------------- wording (the verdict words: harness.verdicts)


def as_points(points: Iterable[Point | Mapping[str, Any]]) -> list[Point]:
    """Points as records: the report's functions also take the JSON objects (tests, scripts build them)."""
    return [p if isinstance(p, Point) else Point.model_validate(p) for p in points]


def as_server(entry: Server | Mapping[str, Any] | None) -> Server:
    return entry if isinstance(entry, Server) else Server.model_validate(entry or {})


def as_servers(servers: Mapping[str, Server | Mapping[str, Any]] | None) -> dict[str, Server]:
    return {k: as_server(v) for k, v in (servers or {}).items()}


def clock(p: Point) -> float | None:
    return p.telemetry.busy_median_sm_clock_mhz if p.telemetry else None


def status_note(p: Point) -> str:
    """Empty for ok points; otherwise e.g. ` (partial)` so a figure is never read as a clean one."""
    return "" if p.status == "ok" else f" ({p.status})"


def cache_note(p: Point) -> str:
    """` ⚠ warm-start` / ` ⚠ cache-not-cold` beside a point measured on a cache that was not cold."""
    return f" ⚠ {p.cache_state}" if p.cache_state not in (None, "cold") else ""


def status_text(p: Point) -> str:
    """`ok`, or e.g. `partial: 2/3 seeds ok, median over those`."""
    if p.status == "ok":
        return "ok"
    n_ok = sum(s == "ok" for s in p.seed_status.values())
    over = "median over those" if n_ok else "figures from not-ok seeds"
    return f"{p.status}: {n_ok}/{len(p.seed_status)} seeds ok, {over}"


def sort_key(v: Any) -> tuple[int, Any]:
    return (0, v) if isinstance(v, int | float) else (1, str(v))


def sweep_order(sweep: Any) -> tuple[Any, ...]:
    """A sweep's values in numeric order (groups=4 before groups=16)."""
    if not isinstance(sweep, dict):
        return (sort_key(sweep),)
    return tuple((k, sort_key(v)) for k, v in sorted(sweep.items()))


def point_order(p: Point) -> tuple[Any, ...]:
    """Server, then sweep values in numeric order (groups 4 before 16), then the point key."""
    return (p.server, tuple(sort_key(v) for v in p.sweep.values()), p.point_key)


# ---------------------------------------------------------------- server labels


def _arg(entry: Server, flag: str) -> Any:
    """A server argument from the manifest's args (list or dict) or server_info, by its SGLang name."""
    args = entry.args
    key = flag.lstrip("-").replace("-", "_")
    if isinstance(args, list):
        flat = [str(a) for a in args]
        for i, a in enumerate(flat):
            if a == flag:
                return flat[i + 1] if i + 1 < len(flat) and not flat[i + 1].startswith("--") else True
            if a.startswith(flag + "="):
                return a.split("=", 1)[1]
    if isinstance(args, dict):
        for k in (key, flag.lstrip("-"), flag):
            if k in args:
                return args[k]
    return entry.info().get(key)


def _default_policy(entry: Server) -> str | None:
    """The default eviction policy of the engine whose marks the server bears (SGLang's and the sim's: its
    server_info keys, its flags or `sglang` in its launch args; harness.engines' adapters), else None."""
    info = entry.info()
    args = entry.args
    if isinstance(args, list):
        flat = [str(a) for a in args]
    else:
        flat = [f"--{k}" for k in args] if isinstance(args, dict) else []
    for ad in ADAPTERS.values():
        m = ad.marks
        if ad.default_policy and (
            any(k in info for k in m.info_keys)
            or any(a.split("=", 1)[0] in m.flags or any(w in a for w in m.words) for a in flat)
        ):
            return ad.default_policy
    return None


def server_policy(entry: Server | Mapping[str, Any] | None) -> str:
    """The radix eviction policy; the engine's default (`lru`: SGLang, the sim) where the server bears its marks,
    else `n/a`."""
    srv = as_server(entry)
    v = _arg(srv, "--radix-eviction-policy")
    if v:
        return str(v)
    return _default_policy(srv) or "n/a"


def server_pool(entry: Server | Mapping[str, Any] | None) -> str:
    srv = as_server(entry)
    pool = srv.pool
    dev = pool.device_tokens or pool.max_total_num_tokens or _arg(srv, "--max-total-tokens")
    text = f"{dev}" if dev else "n/a"
    if pool.host_tokens:
        text += f" + host {pool.host_tokens}"
    elif server_host_tier(srv):
        text += f" + host {pool.host_gb or '?'} GB"
    return text


def server_host_tier(entry: Server | None) -> bool:
    """The server has a host (HiCache) tier: the log gave its size, or the launch line enables it."""
    if entry is None:
        return False
    pool = entry.pool
    return bool(
        pool.host_tokens
        or pool.host_gb
        or _arg(entry, "--enable-hierarchical-cache")
        or _arg(entry, "--enable-hicache")
    )


def server_time_scale(entry: Server | Mapping[str, Any] | None) -> float | None:
    """A sim server's --time-scale (summary `time_scale`, else server_info / args); None for real servers."""
    srv = as_server(entry)
    v: Any = srv.time_scale
    if v is None:
        v = srv.info().get("time_scale") or _arg(srv, "--time-scale")
    try:
        x = float(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None
    return x if x and x > 0 else None


def server_card(entry: Server | Mapping[str, Any] | None) -> str | None:
    """The modelled card of a sim server (server_info, else --card-profile); None when unknown."""
    info = as_server(entry).info()
    card = info.get("card")
    name = card.get("name") if isinstance(card, dict) else None
    return str(name or info.get("card_profile") or _arg(as_server(entry), "--card-profile") or "") or None
