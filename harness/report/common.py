"""What every report writer needs: the summary loaded and checked, cell wording, server labels.

Server labels (policy, pool, time scale, card) come from the manifest's args, else server_info.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.summary import Summary
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


def clock(p: dict[str, Any]) -> Any:
    t = p.get("telemetry") or {}
    return t.get("busy_median_sm_clock_mhz")


def status_note(p: dict[str, Any]) -> str:
    """Empty for ok points; otherwise e.g. ` (partial)` so a figure is never read as a clean one."""
    return "" if p.get("status") == "ok" else f" ({p.get('status')})"


def cache_note(p: dict[str, Any]) -> str:
    """` ⚠ warm-start` / ` ⚠ cache-not-cold` beside a point measured on a cache that was not cold."""
    state = p.get("cache_state")
    return f" ⚠ {state}" if state not in (None, "cold") else ""


def status_text(p: dict[str, Any]) -> str:
    """`ok`, or e.g. `partial: 2/3 seeds ok, median over those`."""
    if p.get("status") == "ok":
        return "ok"
    st = p.get("seed_status", {})
    n_ok = sum(s == "ok" for s in st.values())
    over = "median over those" if n_ok else "figures from not-ok seeds"
    return f"{p.get('status')}: {n_ok}/{len(st)} seeds ok, {over}"


def sort_key(v: Any) -> tuple[int, Any]:
    return (0, v) if isinstance(v, int | float) else (1, str(v))


def sweep_order(sweep: Any) -> tuple[Any, ...]:
    """A sweep's values in numeric order (groups=4 before groups=16)."""
    if not isinstance(sweep, dict):
        return (sort_key(sweep),)
    return tuple((k, sort_key(v)) for k, v in sorted(sweep.items()))


def point_order(p: dict[str, Any]) -> tuple[Any, ...]:
    """Server, then sweep values in numeric order (groups 4 before 16), then the point key."""
    return (p["server"], tuple(sort_key(v) for v in p["sweep"].values()), p["point_key"])


# ---------------------------------------------------------------- server labels


def _arg(entry: dict[str, Any], flag: str) -> Any:
    """A server argument from the manifest's args (list or dict) or server_info, by its SGLang name."""
    args = entry.get("args")
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
    info = entry.get("server_info") or {}
    return info.get(key)


SGLANG_INFO_KEYS = (
    "radix_eviction_policy",
    "disable_radix_cache",
    "chunked_prefill_size",
    "max_total_num_tokens",
)
SGLANG_FLAGS = (
    "--max-total-tokens",
    "--enable-hierarchical-cache",
    "--disable-radix-cache",
    "--mem-fraction-static",
)


def _is_sglang(entry: dict[str, Any]) -> bool:
    """SGLang or the sim (which answers like it): its server_info keys, or its flags in the launch args."""
    info = entry.get("server_info") or {}
    if isinstance(info, dict) and any(k in info for k in SGLANG_INFO_KEYS):
        return True
    args = entry.get("args")
    flat = [str(a) for a in args] if isinstance(args, list) else [f"--{k}" for k in (args or {})]
    return any(a.split("=", 1)[0] in SGLANG_FLAGS or "sglang" in a for a in flat)


def server_policy(entry: dict[str, Any]) -> str:
    """The radix eviction policy; SGLang's default `lru` only for SGLang-like servers, else `n/a`."""
    v = _arg(entry, "--radix-eviction-policy")
    if v:
        return str(v)
    return "lru" if _is_sglang(entry) else "n/a"


def server_pool(entry: dict[str, Any]) -> str:
    pool = entry.get("pool") or {}
    dev = pool.get("device_tokens") or pool.get("max_total_num_tokens") or _arg(entry, "--max-total-tokens")
    text = f"{dev}" if dev else "n/a"
    host = pool.get("host_tokens")
    if host:
        text += f" + host {host}"
    elif pool.get("host_gb") or _arg(entry, "--enable-hierarchical-cache") or _arg(entry, "--enable-hicache"):
        text += f" + host {pool.get('host_gb') or '?'} GB"
    return text


def server_time_scale(entry: dict[str, Any]) -> float | None:
    """A sim server's --time-scale (summary `time_scale`, else server_info / args); None for real servers."""
    v = entry.get("time_scale")
    if v is None:
        v = (entry.get("server_info") or {}).get("time_scale") or _arg(entry, "--time-scale")
    try:
        x = float(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None
    return x if x and x > 0 else None


def server_card(entry: dict[str, Any]) -> str | None:
    """The modelled card of a sim server (server_info, else --card-profile); None when unknown."""
    info = entry.get("server_info") or {}
    card = info.get("card")
    name = card.get("name") if isinstance(card, dict) else None
    return name or info.get("card_profile") or _arg(entry, "--card-profile")
