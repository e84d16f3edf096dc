"""Capture folders → one summary per node: per point and seed, then median and spread over seeds.

Reads only the capture contract (docs/architecture.md): manifest, server log and info, and per point
requests.jsonl, telemetry.jsonl, metrics-before/after.prom and point.json. A missing or broken file
is listed under `problems` with its path and skipped; it never stops the summary. Schema: README.md, "Summary schema".
"""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness import __version__, capture, metrics, serverlog, validate
from harness.errors import HarnessError
from harness.telemetry.stats import point_stats

SCHEMA_VERSION = 1
DISAGREE_POINTS = 2.0  # hit-rate sources further apart than this (percentage points) are flagged
EVIDENCE_LINES = 4
SERIES_POINTS = 300  # SM clock samples kept per seed for the chart
_STATUS_RANK = {"ok": 0, "running": 1, "partial": 2, "interrupted": 3, "failed": 4, "missing": 5}


@dataclass
class SeedCapture:
    """Everything one point x seed folder holds, read leniently."""

    path: Path
    server: str
    seed: int
    sweep: dict[str, Any]
    point: dict[str, Any] | None
    requests: list[dict[str, Any]]
    telemetry: list[dict[str, Any]] | None
    before: metrics.Scrape | None
    after: metrics.Scrape | None
    log: serverlog.ParsedLog | None = None  # the server log of the folder this point came from

    @property
    def status(self) -> str:
        return str(self.point.get("status", "missing")) if self.point else "missing"


@dataclass
class ServerCapture:
    name: str
    path: Path
    info: dict[str, Any] | None
    log: serverlog.ParsedLog | None
    seeds: dict[str, SeedCapture] = field(default_factory=dict)  # point folder name -> capture


@dataclass
class ExperimentCapture:
    node: str
    name: str
    path: Path
    manifest: dict[str, Any]
    servers: dict[str, ServerCapture] = field(default_factory=dict)


class Problems(list):
    """Files that were missing or unreadable: `{path, reason}` each, reported, then skipped."""

    def add(self, path: Path | str, reason: str) -> None:
        self.append({"path": str(path), "reason": reason})


# ---------------------------------------------------------------- reading the capture


def _read_json(path: Path, problems: Problems) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        problems.add(path, f"unreadable JSON ({type(e).__name__}: {e}); skipped")
        return None


def _read_prom(path: Path, problems: Problems) -> metrics.Scrape | None:
    if not path.exists():
        return None
    try:
        scrape = metrics.parse_prometheus(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as e:
        problems.add(path, f"unreadable ({e}); skipped")
        return None
    if scrape.bad_lines:
        problems.add(path, f"{scrape.bad_lines} unreadable lines skipped")
    return scrape


def _sweep_from_name(name: str) -> tuple[dict[str, Any], int | None]:
    """`groups=16,seed=0` → ({"groups": 16}, 0): the fallback when point.json is missing."""
    sweep: dict[str, Any] = {}
    seed = None
    for part in name.split(","):
        if "=" not in part:
            continue
        k, v = part.split("=", 1)
        val: Any = v
        for cast in (int, float):
            try:
                val = cast(v)
                break
            except ValueError:
                pass
        if k == "seed" and isinstance(val, int):
            seed = val
        else:
            sweep[k] = val
    return sweep, seed


def _read_seed(path: Path, server: str, problems: Problems) -> SeedCapture | None:
    point = _read_json(path / capture.POINT, problems)
    if point is not None and not isinstance(point, dict):
        problems.add(path / capture.POINT, "not a JSON object; skipped")
        point = None
    if point is None and (path / capture.POINT).exists() is False:
        problems.add(path / capture.POINT, "missing (point never finished); shown with status missing")
    requests: list[dict[str, Any]] = []
    req_path = path / capture.REQUESTS
    if req_path.exists():
        requests, bad = capture.read_jsonl(req_path)
        if bad:
            problems.add(req_path, f"{bad} unreadable lines skipped (truncated write?)")
    else:
        problems.add(req_path, "missing; point has no requests")
    telemetry = None
    tel_path = path / capture.TELEMETRY
    if tel_path.exists():
        telemetry, bad = capture.read_jsonl(tel_path)
        if bad:
            problems.add(tel_path, f"{bad} unreadable lines skipped")
    name_sweep, name_seed = _sweep_from_name(path.name)
    sweep = point.get("sweep") if point and isinstance(point.get("sweep"), dict) else name_sweep
    seed = point.get("seed") if point and isinstance(point.get("seed"), int) else name_seed
    if seed is None:
        seed = next((r["seed"] for r in requests if isinstance(r.get("seed"), int)), None)
    if seed is None:
        problems.add(path, "no seed in point.json, folder name or requests; skipped")
        return None
    return SeedCapture(
        path=path,
        server=server,
        seed=int(seed),
        sweep=dict(sweep),
        point=point,
        requests=requests,
        telemetry=telemetry,
        before=_read_prom(path / capture.METRICS_BEFORE, problems),
        after=_read_prom(path / capture.METRICS_AFTER, problems),
    )


def _is_point_dir(p: Path) -> bool:
    return p.is_dir() and any((p / n).exists() for n in (capture.POINT, capture.REQUESTS))


def _read_server(path: Path, problems: Problems) -> ServerCapture:
    info = _read_json(path / capture.SERVER_INFO, problems)
    log = None
    log_path = path / capture.SERVER_LOG
    if log_path.exists():
        try:
            log = serverlog.parse_file(log_path)
        except OSError as e:
            problems.add(log_path, f"unreadable ({e}); skipped")
    else:
        problems.add(log_path, "missing; no log evidence for this server")
    srv = ServerCapture(path.name, path, info if isinstance(info, dict) else None, log)
    for sub in sorted(path.iterdir()):
        if _is_point_dir(sub):
            sc = _read_seed(sub, path.name, problems)
            if sc is not None:
                sc.log = log
                srv.seeds[sub.name] = sc
    return srv


def _find_manifests(root: Path) -> list[Path]:
    if (root / capture.MANIFEST).exists():
        return [root]
    found = sorted({m.parent for m in root.glob("*/" + capture.MANIFEST)})
    found += sorted({m.parent for m in root.glob("*/*/" + capture.MANIFEST)})
    return sorted(set(found))


def read_captures(dirs: Sequence[Path | str], problems: Problems) -> list[ExperimentCapture]:
    """Every experiment folder (one with manifest.json) under the given capture folders."""
    out: dict[tuple[str, str], ExperimentCapture] = {}
    for d in map(Path, dirs):
        if not d.is_dir():
            raise HarnessError(f"{d}: capture folder not found")
        exp_dirs = _find_manifests(d)
        if not exp_dirs:
            problems.add(d, "no manifest.json found at depth 0-2; nothing summarized from it")
        for exp_dir in exp_dirs:
            manifest = _read_json(exp_dir / capture.MANIFEST, problems)
            manifest = manifest if isinstance(manifest, dict) else {}
            node = str(manifest.get("node") or exp_dir.parent.name)
            name = str(manifest.get("experiment") or exp_dir.name)
            exp = out.setdefault((node, name), ExperimentCapture(node, name, exp_dir, manifest))
            for sub in sorted(exp_dir.iterdir()):
                if not sub.is_dir() or not (
                    (sub / capture.SERVER_LOG).exists() or any(_is_point_dir(p) for p in sub.iterdir())
                ):
                    continue
                srv = _read_server(sub, problems)
                prev = exp.servers.get(srv.name)
                if prev is None:
                    exp.servers[srv.name] = srv
                    continue
                for pname, sc in srv.seeds.items():  # the same server in two capture folders: merge points
                    old = prev.seeds.get(pname)
                    if old is not None:
                        problems.add(sc.path, f"same point also in {old.path}; kept the ok or first one")
                    if old is None or (old.status != "ok" and sc.status == "ok"):
                        prev.seeds[pname] = sc
    return list(out.values())


# ---------------------------------------------------------------- figures of one seed


def _quantile(s: pd.Series, q: float) -> float | None:
    s = s.dropna()
    return float(s.quantile(q)) if len(s) else None


def _hit(cached: pd.Series, prompt: pd.Series) -> float | None:
    p = float(prompt.sum())
    return float(cached.sum()) / p if p > 0 else None


def _usage_cached(ok: pd.DataFrame) -> pd.Series | None:
    """Cached tokens per request; None when the server never said (SGLang reports null for zero)."""
    if "cached_tokens" not in ok or ok["cached_tokens"].isna().all():
        return None
    return ok["cached_tokens"].fillna(0).astype(float)


def _timings_hit(ok: pd.DataFrame) -> float | None:
    """Σ cache_n / Σ (cache_n + prompt_n) over requests whose server_timings give both (llama.cpp)."""
    if "server_timings" not in ok:
        return None
    cached = prompt = 0.0
    for t in ok["server_timings"]:
        c = t.get("cache_n") if isinstance(t, dict) else None
        n = t.get("prompt_n") if isinstance(t, dict) else None
        if _is_num(c) and _is_num(n):
            cached += c
            prompt += c + n
    return cached / prompt if prompt > 0 else None


def request_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Latency, throughput and hit-rate figures (usage, server timings) of one point x seed from its records."""
    df = pd.DataFrame(rows)
    fig: dict[str, Any] = {"requests": len(df), "ok": 0, "failures": 0}
    if df.empty:
        return fig
    for col in (
        "ok",
        "ttft_s",
        "e2e_s",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "turn",
        "position",
    ):
        if col not in df:
            df[col] = None
    okmask = df["ok"].fillna(False).astype(bool)
    ok = df[okmask].copy()
    fig["ok"] = int(okmask.sum())
    fig["failures"] = int((~okmask).sum())
    if "error_kind" in df and fig["failures"]:
        fig["errors"] = {
            str(k): int(v) for k, v in df.loc[~okmask, "error_kind"].fillna("unknown").value_counts().items()
        }
    ttft = pd.to_numeric(ok["ttft_s"], errors="coerce")
    fig["ttft_median_s"] = _quantile(ttft, 0.5)
    fig["ttft_p90_s"] = _quantile(ttft, 0.9)
    fig["ttft_p99_s"] = _quantile(ttft, 0.99)
    gaps = [
        np.diff(np.asarray(t, dtype=float))
        for t in ok.get("token_mono", [])
        if isinstance(t, list) and len(t) > 1
    ]
    itl = pd.Series(np.concatenate(gaps)) if gaps else pd.Series(dtype=float)
    fig["itl_median_s"] = _quantile(itl, 0.5)
    fig["itl_p99_s"] = _quantile(itl, 0.99)
    fig["e2e_median_s"] = _quantile(pd.to_numeric(ok["e2e_s"], errors="coerce"), 0.5)
    # throughput over the span from the first scheduled send to the last completion
    span = None
    if "scheduled_mono" in df and "done_mono" in df:
        start = pd.to_numeric(df["scheduled_mono"], errors="coerce").min()
        end = pd.to_numeric(df["done_mono"], errors="coerce").max()
        if pd.notna(start) and pd.notna(end) and end > start:
            span = float(end - start)
    fig["duration_s"] = span
    out_tok = pd.to_numeric(ok["completion_tokens"], errors="coerce").fillna(0)
    in_tok = pd.to_numeric(ok["prompt_tokens"], errors="coerce").fillna(0)
    fig["output_tokens"] = int(out_tok.sum())
    fig["prompt_tokens"] = int(in_tok.sum())
    fig["output_tok_s"] = float(out_tok.sum()) / span if span else None
    fig["input_tok_s"] = float(in_tok.sum()) / span if span else None
    cached = _usage_cached(ok)
    fig["cached_tokens"] = int(cached.sum()) if cached is not None else None
    fig["hit_rate_usage"] = _hit(cached, in_tok) if cached is not None else None
    fig["hit_rate_timings"] = _timings_hit(ok)
    for src in ("device", "host"):
        col = f"cached_{src}"
        fig[f"cached_{src}_tokens"] = (
            int(ok[col].fillna(0).sum()) if col in ok and not ok[col].isna().all() else None
        )
    for by, name in (("turn", "by_turn"), ("position", "by_position")):
        keyed = ok[ok[by].notna()]
        if keyed.empty or (by == "turn" and keyed[by].nunique() < 2):
            continue
        hits: dict[str, float | None] = {}
        ttfts: dict[str, float | None] = {}
        for key, g in keyed.groupby(keyed[by].astype(int)):
            gp = pd.to_numeric(g["prompt_tokens"], errors="coerce").fillna(0)
            gc = cached.loc[g.index] if cached is not None else None
            hits[str(key)] = _hit(gc, gp) if gc is not None else None
            ttfts[str(key)] = _quantile(pd.to_numeric(g["ttft_s"], errors="coerce"), 0.5)
        fig[f"hit_rate_usage_{name}"] = hits
        fig[f"ttft_median_s_{name}"] = ttfts
    return fig


HIT_RATE_SOURCES = ("hit_rate_usage", "hit_rate_timings", "hit_rate_log", "hit_rate_counters")


def _hit_rate_agreement(fig: dict[str, Any]) -> None:
    vals = [fig.get(k) for k in HIT_RATE_SOURCES]
    vals = [v for v in vals if isinstance(v, float | int)]
    fig["hit_rate_sources"] = len(vals)
    spread = (max(vals) - min(vals)) * 100 if len(vals) > 1 else None
    fig["hit_rate_spread_points"] = spread
    fig["hit_rate_disagree"] = bool(spread is not None and spread > DISAGREE_POINTS)


def _window(sc: SeedCapture) -> tuple[float, float] | None:
    """The point's wall-clock window: point.json's, else from the request records."""
    if (
        sc.point
        and isinstance(sc.point.get("start_wall"), int | float)
        and isinstance(sc.point.get("end_wall"), int | float)
    ):
        return float(sc.point["start_wall"]), float(sc.point["end_wall"])
    starts = [
        r["start_wall"]
        for r in sc.requests
        if isinstance(r.get("start_wall"), int | float) and r["start_wall"]
    ]
    if not starts:
        return None
    ends = [r["start_wall"] + (r.get("e2e_s") or 0) for r in sc.requests if r.get("start_wall")]
    return min(starts), max(ends)


def _slack(log: serverlog.ParsedLog) -> float:
    """How far to widen a point's window: 1 s for whole-second stamps, 0.1 s with SGLANG_LOG_MS=1."""
    stamped = [r for r in log.records if r.kind in ("prefill", "flush") and r.wall is not None]
    return 0.1 if stamped and all(r.ms for r in stamped) else 1.0


def slice_log(
    log: serverlog.ParsedLog, seeds: Iterable[SeedCapture], shift: float = 0.0
) -> dict[Path, tuple[list[serverlog.LogRecord], str]]:
    """Each point's log records, and how they were chosen.

    The runner flushes the cache just after a point's start_wall, so when the point says it flushed,
    its records are those after its own `Cache flushed successfully!` line (matched in time order)
    up to the next flush line or end_wall + slack: exact even when several points share one second
    of 1 s log stamps. Otherwise the time window [start_wall, end_wall], widened by the slack.
    """
    recs = [r for r in log.records if r.wall is not None]
    slack = _slack(log)
    flushes = [i for i, r in enumerate(recs) if r.kind == "flush"]
    out: dict[Path, tuple[list[serverlog.LogRecord], str]] = {}
    nxt = 0
    timed = [(w, sc) for sc in seeds if sc.log is log and (w := _window(sc)) is not None]
    for (start, end), sc in sorted(timed, key=lambda x: x[0]):
        lo, hi = start - slack, end + slack
        anchor = None
        if sc.point and sc.point.get("flushed"):
            j = nxt
            while j < len(flushes) and recs[flushes[j]].wall + shift < lo:  # type: ignore[operator]
                j += 1
            if j < len(flushes) and recs[flushes[j]].wall + shift <= hi:  # type: ignore[operator]
                anchor, nxt = j, j + 1
        if anchor is not None:
            stop = flushes[anchor + 1] if anchor + 1 < len(flushes) else len(recs)
            chosen = [r for r in recs[flushes[anchor] + 1 : stop] if r.wall + shift <= hi]  # type: ignore[operator]
            how = f"after the point's flush line, to the next flush line or end_wall + {slack:g} s"
        else:
            chosen = [r for r in recs if lo <= r.wall + shift <= hi]  # type: ignore[operator]
            how = f"time window [start_wall - {slack:g} s, end_wall + {slack:g} s] (log stamps are coarse)"
        out[sc.path] = (chosen, how)
    return out


def _log_figures(
    log: serverlog.ParsedLog | None,
    sliced: tuple[list[serverlog.LogRecord], str] | None,
    end: float | None,
    shift: float,
) -> tuple[dict[str, Any], list[str]]:
    """Hit rate from the point's prefill lines, the pool sizes logged by then, and evidence lines."""
    fig: dict[str, Any] = {"hit_rate_log": None}
    if log is None or sliced is None:
        fig["log_slice"] = (
            "no server log" if log is None else "no time window (no point.json, no request times)"
        )
        return fig, []
    records, how = sliced
    prefill = _one_tp_rank([r for r in records if r.kind == "prefill"])
    tot = serverlog.prefill_totals(prefill)
    fig["log_slice"] = how
    fig["log_prefill_lines"] = tot["prefill_lines"]
    fig["log_new_tokens"] = tot["new_tokens"]
    fig["log_cached_tokens"] = tot["cached_tokens"]
    fig["hit_rate_log"] = tot["hit_rate"]
    limit = (end + _slack(log)) if end is not None else float("inf")
    pools = serverlog.pool_sizes(r for r in log.records if r.wall is None or r.wall + shift <= limit)
    fig["pool_device_tokens"] = pools["device_tokens"]
    fig["pool_host_tokens"] = pools["host_tokens"]
    fig["max_total_num_tokens"] = pools["max_total_num_tokens"]
    evidence = [r.line for r in prefill[:1]]
    hits = [r.line for r in prefill[1:] if serverlog.token_count(r.fields.get("cached_token")) > 0]
    evidence += hits[: EVIDENCE_LINES - 1]
    return fig, evidence


def _one_tp_rank(records: list[serverlog.LogRecord]) -> list[serverlog.LogRecord]:
    """Tensor-parallel ranks may each print the same batch: keep the lowest TP rank's lines only."""
    tps = {r.ranks.get("TP") for r in records} - {None}
    if len(tps) <= 1:
        return records
    keep = min(tps)  # type: ignore[type-var]
    return [r for r in records if r.ranks.get("TP") in (None, keep)]


def _counter_figures(sc: SeedCapture) -> dict[str, Any]:
    fig: dict[str, Any] = {"hit_rate_counters": None}
    if sc.before is None or sc.after is None:
        return fig
    d = metrics.counter_deltas(sc.before, sc.after)
    cf = metrics.cache_figures(d)
    fig["hit_rate_counters"] = cf["hit_rate"]
    fig["counter_prompt_tokens"] = cf["prompt_tokens"]
    fig["counter_cached_tokens"] = cf["cached_tokens"]
    for src, v in cf["cached_by_source"].items():
        fig[f"counter_cached_{src}_tokens"] = v
    for k in ("evicted_tokens", "load_back_tokens"):
        fig[f"counter_{k}"] = cf[k]
    fig["counter_reset"] = cf["reset"]
    if d.went_down or d.vanished:
        fig["counter_reset_series"] = d.went_down + d.vanished
    return fig


# ---------------------------------------------------------------- telemetry (owned by harness.telemetry/validate)


def _telemetry_stats(
    samples: list[dict[str, Any]] | None, status: str | None, output_tokens: int | None
) -> dict[str, Any]:
    """harness.telemetry.stats.point_stats over the samples; only a status when there are none."""
    if samples is None:
        return {"status": status or "absent"}
    try:
        return dict(point_stats(samples, output_tokens, status))
    except Exception as e:  # noqa: BLE001 - a bad sample file must not stop the summary
        return {"status": f"stats failed ({type(e).__name__}: {e})", "n_samples": None}


def clock_series(samples: list[dict[str, Any]]) -> dict[str, list[float]] | None:
    """(seconds since the first sample, SM clock MHz) of the first GPU, thinned for a chart (docs/telemetry.md)."""
    rows = [s for s in samples if s.get("kind", "sample") == "sample"]
    first_gpu = next((s.get("uuid", s.get("gpu")) for s in rows), None)
    pts = [
        (float(s["t_mono"]), float(s["sm_clock_mhz"]))
        for s in rows
        if _is_num(s.get("t_mono"))
        and _is_num(s.get("sm_clock_mhz"))
        and s.get("uuid", s.get("gpu")) == first_gpu
    ]
    if not pts:
        return None
    pts.sort()
    step = max(1, math.ceil(len(pts) / SERIES_POINTS))
    pts = pts[::step]
    t0 = pts[0][0]
    return {"t_s": [round(t - t0, 3) for t, _ in pts], "sm_clock_mhz": [c for _, c in pts]}


# ---------------------------------------------------------------- across seeds


def _is_num(v: Any) -> bool:
    return (
        isinstance(v, int | float)
        and not isinstance(v, bool)
        and not (isinstance(v, float) and math.isnan(v))
    )


def merge_seeds(figs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Median and [min, max] of every numeric figure over seeds; flags are or-ed; dicts go key by key."""
    median: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    keys: list[str] = []
    for f in figs:
        keys += [k for k in f if k not in keys]
    for k in keys:
        vals = [f.get(k) for f in figs if f.get(k) is not None]
        if not vals:
            median[k] = None
            continue
        if all(isinstance(v, bool) for v in vals):
            median[k] = any(vals)
        elif all(_is_num(v) for v in vals):
            median[k] = float(np.median(np.asarray(vals, dtype=float)))
            spread[k] = [float(min(vals)), float(max(vals))]
        elif all(isinstance(v, dict) for v in vals):
            m, s = merge_seeds(vals)
            median[k] = m
            if s:
                spread[k] = s
    return median, spread


def _point_key(sweep: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sweep.items()) or "default"


def _find_workload(manifest: dict[str, Any]) -> dict[str, Any]:
    """The spec's workload section, wherever the runner put it in the manifest (depth <= 2)."""
    if isinstance(manifest.get("workload"), dict):
        return manifest["workload"]
    for v in manifest.values():
        if isinstance(v, dict) and isinstance(v.get("workload"), dict):
            return v["workload"]
    return {}


def _tz_shift(log: serverlog.ParsedLog | None, seeds: Iterable[SeedCapture]) -> float:
    """Seconds to add to log times when the log was read in another time zone than it was written.

    Log stamps carry no zone. If no prefill line falls in any point window as read, but a whole
    number of half hours puts most of them there, that shift is used (and reported).
    """
    if log is None:
        return 0.0
    walls = [r.wall for r in log.records if r.kind == "prefill" and r.wall is not None]
    windows = [w for w in (_window(sc) for sc in seeds if sc.log is log) if w]
    if not walls or not windows:
        return 0.0

    def hits(shift: float) -> int:
        return sum(any(a - 1 <= t + shift <= b + 1 for a, b in windows) for t in walls)

    if hits(0.0):
        return 0.0
    best = max((h * 1800.0 for h in range(-28, 29)), key=hits)
    return best if hits(best) > len(walls) // 2 else 0.0


def _time_scale(info: Any, args: Any, man_servers: Any, sname: str, manifest: dict[str, Any]) -> float | None:
    """A sim server's --time-scale (its wall clock runs X times the modelled card's); None for real servers.

    From server_info.json (serve-sim echoes its arguments), else the server's args, else the bench's
    `bench.time_scale` when the manifest says this server was launched as the sim.
    """

    def num(v: Any) -> float | None:
        try:
            x = float(v)
        except (TypeError, ValueError):
            return None
        return x if x > 0 else None

    if isinstance(info, dict) and info.get("time_scale") is not None:
        return num(info["time_scale"])
    if isinstance(args, list):
        flat = [str(a) for a in args]
        for i, a in enumerate(flat):
            if a == "--time-scale" and i + 1 < len(flat):
                return num(flat[i + 1])
            if a.startswith("--time-scale="):
                return num(a.split("=", 1)[1])
    man = man_servers.get(sname) if isinstance(man_servers, dict) else None
    bench = manifest.get("bench")
    if isinstance(man, dict) and "sim" in (man.get("launch"), man.get("engine")) and isinstance(bench, dict):
        return num(bench.get("time_scale"))
    return None


def summarize_experiment(
    exp: ExperimentCapture, problems: Problems
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The experiment's entry (manifest, servers) and its points."""
    servers: dict[str, Any] = {}
    points: list[dict[str, Any]] = []
    workload = _find_workload(exp.manifest)
    man_servers = exp.manifest.get("servers")
    for sname, srv in sorted(exp.servers.items()):
        args = None
        if isinstance(man_servers, dict) and isinstance(man_servers.get(sname), dict):
            args = man_servers[sname].get("args", man_servers[sname])
        elif isinstance(man_servers, list):
            args = next(
                (s.get("args", s) for s in man_servers if isinstance(s, dict) and s.get("name") == sname),
                None,
            )
        servers[sname] = {
            "args": args,
            "server_info": srv.info,
            "time_scale": _time_scale(srv.info, args, man_servers, sname, exp.manifest),
            "pool": serverlog.pool_sizes(srv.log.records if srv.log else []),
            "log": {
                "path": str(srv.path / capture.SERVER_LOG) if srv.log else None,
                "lines": srv.log.lines if srv.log else 0,
                "counts": srv.log.counts() if srv.log else {},
                "time_shift_s": _tz_shift(srv.log, srv.seeds.values()),
            },
        }
        slices: dict[Path, tuple[Any, float]] = {}
        for log in {id(sc.log): sc.log for sc in srv.seeds.values() if sc.log is not None}.values():
            shift = _tz_shift(log, srv.seeds.values())
            for path, sl in slice_log(log, srv.seeds.values(), shift).items():
                slices[path] = (sl, shift)
        groups: dict[str, list[SeedCapture]] = {}
        for sc in srv.seeds.values():
            groups.setdefault(_point_key(sc.sweep), []).append(sc)
        for key, seeds in groups.items():
            points.append(
                _summarize_point(exp, sname, key, sorted(seeds, key=lambda s: s.seed), slices, workload)
            )
    entry = {"path": str(exp.path), "manifest": exp.manifest, "servers": servers}
    return entry, points


def _summarize_point(
    exp: ExperimentCapture,
    server: str,
    key: str,
    seeds: list[SeedCapture],
    slices: dict[Path, tuple[Any, float]],
    workload: dict[str, Any],
) -> dict[str, Any]:
    per_seed: dict[str, Any] = {}
    figs_ok: list[dict[str, Any]] = []
    figs_all: list[dict[str, Any]] = []
    evidence: list[str] = []
    all_samples: list[dict[str, Any]] = []
    any_samples = False
    statuses: dict[str, str] = {}
    series: dict[str, Any] = {}
    for sc in seeds:
        fig = request_figures(sc.requests)
        sliced, shift = slices.get(sc.path, (None, 0.0))
        window = _window(sc)
        log_fig, ev = _log_figures(sc.log, sliced, window[1] if window else None, shift)
        fig.update(log_fig)
        fig.update(_counter_figures(sc))
        _hit_rate_agreement(fig)
        if not evidence:
            evidence = ev
        tel_status = sc.point.get("telemetry_status") if sc.point else None
        stats = _telemetry_stats(sc.telemetry, tel_status, fig.get("output_tokens"))
        if sc.telemetry:
            any_samples = True
            all_samples += sc.telemetry
            cs = clock_series(sc.telemetry)
            if cs:
                series[str(sc.seed)] = cs
        statuses[str(sc.seed)] = sc.status
        per_seed[str(sc.seed)] = {
            "status": sc.status,
            "path": str(sc.path),
            "figures": fig,
            "telemetry": stats,
        }
        if sc.point and sc.point.get("failure"):
            per_seed[str(sc.seed)]["failure"] = sc.point["failure"]
        figs_all.append(fig)
        if sc.status == "ok":
            figs_ok.append(fig)
    worst = max(statuses.values(), key=lambda s: _STATUS_RANK.get(s, 4))
    used = figs_ok or figs_all
    median, spread = merge_seeds(used)
    first_status = next((sc.point.get("telemetry_status") for sc in seeds if sc.point), None)
    out_tokens = sum(f.get("output_tokens") or 0 for f in figs_all)
    tel = _telemetry_stats(all_samples if any_samples else None, first_status, out_tokens)
    sweep = dict(seeds[0].sweep)
    wl = {**workload, **{k: v for k, v in sweep.items()}}
    to_keep = None
    if _is_num(wl.get("groups")) and _is_num(wl.get("system_prompt_tokens")):
        to_keep = int(wl["groups"] * wl["system_prompt_tokens"])
    return {
        "experiment": exp.name,
        "server": server,
        "sweep": sweep,
        "point_key": key,
        "status": worst,
        "seed_status": statuses,
        "median_over": "ok seeds" if figs_ok else "all seeds (none ok)",
        "workload_kind": wl.get("kind"),
        "prompt_tokens_to_keep": to_keep,
        "seeds": per_seed,
        "median": median,
        "spread": spread,
        "telemetry": tel,
        "verdict": validate.point_verdict(tel),
        "clock_series": series,
        "evidence": evidence,
    }


def summarize(dirs: Sequence[Path | str]) -> dict[str, dict[str, Any]]:
    """Capture folders → {node: summary}. Several folders of the same node merge into one summary."""
    problems = Problems()
    exps = read_captures(dirs, problems)
    by_node: dict[str, list[ExperimentCapture]] = {}
    for e in exps:
        by_node.setdefault(e.node, []).append(e)
    out: dict[str, dict[str, Any]] = {}
    for node, node_exps in sorted(by_node.items()):
        experiments: dict[str, Any] = {}
        points: list[dict[str, Any]] = []
        for e in sorted(node_exps, key=lambda x: x.name):
            entry, pts = summarize_experiment(e, problems)
            experiments[e.name] = entry
            points += pts
        summary = {
            "schema_version": SCHEMA_VERSION,
            "node": node,
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "generated_on": socket.gethostname(),
            "harness_version": __version__,
            "sources": [str(Path(d)) for d in dirs],
            "experiments": experiments,
            "points": points,
            "pairs": validate.pair_verdicts(points),
            "notes": [],
            "problems": [p for p in problems if _belongs(p["path"], node_exps, exps)],
        }
        out[node] = summary
    if not out:
        raise HarnessError(f"{', '.join(map(str, dirs))}: no experiment folder with manifest.json found")
    return out


def _belongs(path: str, mine: Iterable[ExperimentCapture], every: Iterable[ExperimentCapture]) -> bool:
    """A problem goes to the node whose experiment folder holds it; one outside every folder goes to all."""
    under = [e for e in every if Path(path).is_relative_to(e.path)]
    return not under or any(e is u for e in mine for u in under)


def write_summaries(summaries: dict[str, dict[str, Any]], out: Path) -> list[Path]:
    """A directory (or a path without .json) gets <node>.json per node; a .json path takes one node."""
    out = Path(out)
    if out.suffix == ".json" and not out.is_dir():
        if len(summaries) > 1:
            raise HarnessError(
                f"{out}: captures hold several nodes ({', '.join(summaries)}); give a directory"
            )
        targets = {next(iter(summaries)): out}
    else:
        targets = {node: out / f"{node}.json" for node in summaries}
    for node, path in targets.items():
        capture.write_json_atomic(path, summaries[node])
    return list(targets.values())
