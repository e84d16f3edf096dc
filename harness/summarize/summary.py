"""Capture folders → one summary per node: per point and seed, then median and spread over seeds.

harness.summarize.read reads the capture, harness.summarize.figures computes each seed's figures;
here they merge over seeds, get their verdicts (harness.verdicts, thresholds kept in the summary)
and are written through the types of harness.summary (schema: docs/summary.md).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from harness import __version__, capture, serverlog, verdicts
from harness.engines import named
from harness.engines.facts import server_cache_facts
from harness.errors import HarnessError
from harness.spec import ExperimentSpec, SharedPrefixWorkload, Workload, captured_spec, point_of
from harness.summarize.anatomy import median_anatomy, seed_anatomy
from harness.summarize.capacity import server_search
from harness.summarize.figures import (
    clock_series,
    counter_figures,
    hit_rate_agreement,
    is_num,
    joined,
    load_window,
    log_figures,
    point_window,
    request_figures,
    slice_log,
    telemetry_stats,
    tz_shift,
)
from harness.summarize.funnel import add_health
from harness.summarize.intervals import seed_intervals
from harness.summarize.modelled import card_goodput, point_modelled, seed_modelled
from harness.summarize.prediction import add_prediction
from harness.summarize.read import ExperimentCapture, Problems, SeedCapture, ServerCapture, read_captures
from harness.summarize.replicas import merged_slices, replica_figures, replicas_median, worker_slices
from harness.summarize.tiers import tier_figures
from harness.summarize.tool_gap import point_tool_gap
from harness.summary import (
    SCHEMA_VERSION,
    CacheJudgement,
    ClockVerdict,
    Experiment,
    Figures,
    Pair,
    Point,
    Problem,
    Seed,
    Server,
    Summary,
    Telemetry,
    write_summary,
)
from harness.summary.figures import ClockSeries, Modelled
from harness.summary.model import CacheFacts, Pool, ServerLog
from harness.verdicts import Thresholds, cache_state, worst_state
from harness.verdicts.zero_reuse import FLAG, salted_hits

_STATUS_RANK = {"ok": 0, "running": 1, "partial": 2, "interrupted": 3, "failed": 4, "missing": 5}


def merge_seeds(figs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Median and [min, max] of every numeric figure over seeds; flags are or-ed; dicts go key by key."""
    median: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    keys: list[str] = []
    for f in figs:
        keys += [k for k in f if k not in keys]
    for k in keys:
        vals = [v for f in figs if (v := f.get(k)) is not None]
        if not vals:
            median[k] = None
            continue
        if all(isinstance(v, bool) for v in vals):
            median[k] = any(vals)
        elif all(is_num(v) for v in vals):
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


def _captured(exp: ExperimentCapture, problems: Problems) -> ExperimentSpec | None:
    """The spec the experiment ran, rebuilt through harness.spec from its manifest (its types and
    defaults, none restated here); None, with a problem noted, when the manifest's spec does not parse."""
    try:
        return captured_spec(exp.manifest, str(exp.path / capture.MANIFEST))
    except HarnessError as e:
        problems.add(exp.path / capture.MANIFEST, f"{e}; the workload's figures are left out")
        return None


def _workload_at(spec: ExperimentSpec | None, sweep: dict[str, Any]) -> Workload | None:
    """The workload one point ran: the spec's, with the point's sweep values."""
    point = point_of(spec, sweep) if spec is not None else None
    return point.workload if point is not None else None


def _goodput_base(sc: SeedCapture) -> int | None:
    """Requests goodput is a fraction of: scheduled, less those a duration_s left unsent (point.json)."""
    p = sc.point or {}
    n = p.get("requests_scheduled")
    return int(n) - int(p.get("requests_not_sent") or 0) if is_num(n) else None


def _time_scale(info: Any, args: Any, man_servers: Any, sname: str, manifest: dict[str, Any]) -> float | None:
    """A sim server's --time-scale (its wall clock runs X times the modelled card's); None for real servers.

    From server_info.json (serve-sim echoes its arguments), else the server's args, else the bench's
    `bench.time_scale` when the manifest says this server ran an engine bench paces (its launch or its
    engine's adapter is `time_scaled`: the sim).
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
    if (
        isinstance(man, dict)
        and any(a.time_scaled for a in named(man.get("launch"), man.get("engine")))
        and isinstance(bench, dict)
    ):
        return num(bench.get("time_scale"))
    return None


def summarize_experiment(
    exp: ExperimentCapture, problems: Problems, thresholds: Thresholds | None = None
) -> tuple[Experiment, list[Point]]:
    """The experiment's entry (manifest, servers) and its points, with verdicts at these thresholds."""
    th = thresholds or Thresholds()
    servers: dict[str, Server] = {}
    points: list[Point] = []
    spec = _captured(exp, problems)
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
        facts = CacheFacts.model_validate(server_cache_facts(srv))
        servers[sname] = Server(
            cache=facts,
            args=args,
            server_info=srv.info,
            time_scale=_time_scale(srv.info, args, man_servers, sname, exp.manifest),
            pool=Pool.model_validate(serverlog.pool_sizes(srv.log.records if srv.log else [])),
            log=ServerLog(
                path=str(srv.path / capture.SERVER_LOG) if srv.log else None,
                lines=srv.log.lines if srv.log else 0,
                counts=srv.log.counts() if srv.log else {},
                time_shift_s=tz_shift(srv.log, srv.seeds.values()),
            ),
        )
        if srv.replicas is not None:
            servers[sname].replicas = srv.replicas
            servers[sname].worker_logs = {n: str(w.path / capture.SERVER_LOG) for n, w in srv.workers.items()}
        if spec is not None and spec.search is not None:
            servers[sname].search = server_search(spec.search, srv.seeds.values())
        slices: dict[Path, tuple[Any, float]] = {}
        per_worker = worker_slices(srv) if srv.workers else {}
        for log in {id(sc.log): sc.log for sc in srv.seeds.values() if sc.log is not None}.values():
            shift = tz_shift(log, srv.seeds.values())
            for path, sl in slice_log(log, srv.seeds.values(), shift).items():
                slices[path] = (sl, shift)
        if srv.workers:  # replicas: the log figures are sums over every worker's own slice
            slices = merged_slices(per_worker)
        groups: dict[str, list[SeedCapture]] = {}
        for sc in srv.seeds.values():
            groups.setdefault(_point_key(sc.sweep), []).append(sc)
        for key, seeds in groups.items():
            ordered = sorted(seeds, key=lambda s: s.seed)
            point = _summarize_point(exp, sname, key, ordered, slices, spec, th, per_worker)
            _add_cache_state(point, seeds, facts.block_size)
            if spec is not None and spec.salt:
                flag_salted(point, seeds, facts.block_size)
            add_prediction(point, seeds, srv.info, _workload_at(spec, ordered[0].sweep), _replica_count(srv))
            add_health(point, ordered)  # hicache_funnel and health verdicts (harness.summarize.funnel)
            points.append(point)
    return Experiment(path=str(exp.path), manifest=exp.manifest, servers=servers), points


def _replica_count(srv: ServerCapture) -> int:
    """Workers behind the gateway (1 for a plain server), from replicas.json."""
    n = (srv.replicas or {}).get("replicas") if isinstance(srv.replicas, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else 1


def _summarize_point(
    exp: ExperimentCapture,
    server: str,
    key: str,
    seeds: list[SeedCapture],
    slices: dict[Path, tuple[Any, float]],
    spec: ExperimentSpec | None,
    thresholds: Thresholds,
    per_worker: dict[str, Any] | None = None,
) -> Point:
    per_seed: dict[str, Seed] = {}
    figs_ok: list[dict[str, Any]] = []
    figs_all: list[dict[str, Any]] = []
    evidence: list[str] = []
    all_samples: list[dict[str, Any]] = []
    any_samples = False
    statuses: dict[str, str] = {}
    series: dict[str, Any] = {}
    sources: list[str] = []
    warned: list[float] = []
    slo = spec.load.slo if spec is not None else None
    agent = bool(seeds) and getattr(_workload_at(spec, dict(seeds[0].sweep)), "kind", None) == "agent"
    for sc in seeds:
        parts = [
            request_figures(sc.requests, slo, _goodput_base(sc), agent=agent),
            Figures(time_limited=bool(sc.point and sc.point.get("time_limited"))),
        ]
        sliced, shift = slices.get(sc.path, (None, 0.0))
        mfig, msource, mwarned = seed_modelled(sc.requests, sliced[0] if sliced else None)
        if mfig is not None and msource is not None:
            base = _goodput_base(sc)  # goodput on the card's clock too: what a capacity search judges by
            mgood = card_goodput(sc.requests, slo, base if base is not None else len(sc.requests))
            if mgood is not None:
                mfig["goodput"] = mgood
            parts.append(Figures(modelled=Modelled.model_validate(mfig)))
            sources.append(msource)
        warned += mwarned
        window = point_window(sc)
        flushed = bool(sc.point and sc.point.get("flushed"))
        log_fig, ev = log_figures(
            sc.log, sliced, window[1] if window else None, shift, load_window(sc, window), flushed
        )
        parts += [log_fig, counter_figures(sc)]
        srv = exp.servers[server]
        if srv.workers:
            parts.append(replica_figures(sc, srv, per_worker or {}))
        fig = joined(*parts)
        fig = joined(fig, hit_rate_agreement(fig))
        fig = joined(fig, tier_figures(fig, sc, exp.servers[server].info))
        fig = joined(fig, seed_anatomy(sc, exp.servers[server].info, fig))  # the miss anatomy
        if not evidence:
            evidence = ev
        tel_status = sc.point.get("telemetry_status") if sc.point else None
        out_tok = fig.output_tokens
        stats = telemetry_stats(
            sc.telemetry, tel_status, int(out_tok) if out_tok is not None else None, sc.requests
        )
        if sc.telemetry:
            any_samples = True
            all_samples += sc.telemetry
            cs = clock_series(sc.telemetry)
            if cs:
                series[str(sc.seed)] = cs
        statuses[str(sc.seed)] = sc.status
        failure = sc.point.get("failure") if sc.point else None
        per_seed[str(sc.seed)] = Seed(
            status=sc.status,
            path=str(sc.path),
            figures=fig,
            telemetry=Telemetry.model_validate(stats),
            **({"failure": failure} if failure else {}),  # absent, not null, when point.json gives none
        )
        figs_all.append(fig.to_json())
        if sc.status == "ok":
            figs_ok.append(fig.to_json())
    worst = max(statuses.values(), key=lambda s: _STATUS_RANK.get(s, 4))
    used = figs_ok or figs_all
    median, spread = merge_seeds(used)
    replicas_median(median, used)
    median_anatomy(median, used, seeds, exp.servers[server].info, len(exp.servers[server].workers) or 1)
    first_status = next((sc.point.get("telemetry_status") for sc in seeds if sc.point), None)
    out_tokens = sum(f.get("output_tokens") or 0 for f in figs_all)
    all_requests = [r for sc in seeds for r in sc.requests]
    tel = telemetry_stats(all_samples if any_samples else None, first_status, out_tokens, all_requests)
    sweep = dict(seeds[0].sweep)
    wl = _workload_at(spec, sweep)
    to_keep = None
    if isinstance(wl, SharedPrefixWorkload):
        to_keep = wl.groups * wl.system_prompt_tokens
    modelled = point_modelled(median.get("modelled"), sources, warned)
    telemetry = Telemetry.model_validate(tel)
    gap = point_tool_gap(
        [sc.requests for sc in seeds if sc.status == "ok"] or [sc.requests for sc in seeds], wl
    )
    return Point(
        experiment=exp.name,
        server=server,
        sweep=sweep,
        point_key=key,
        status=worst,
        seed_status=statuses,
        median_over="ok seeds" if figs_ok else "all seeds (none ok)",
        workload_kind=wl.kind if wl is not None else None,
        prompt_tokens_to_keep=to_keep,
        seeds=per_seed,
        median=Figures.model_validate(median),
        spread=spread,
        **({"interval": iv} if (iv := seed_intervals(used)) else {}),
        telemetry=telemetry,
        modelled=Modelled.model_validate(modelled) if modelled is not None else None,
        verdict=ClockVerdict.model_validate(verdicts.point_verdict(telemetry, thresholds)),
        clock_series={k: ClockSeries.model_validate(v) for k, v in series.items()},
        evidence=evidence,
        **({"tool_gap": gap} if gap is not None else {}),  # absent, not null, for other workloads
    )


def flag_salted(point: Point, seeds: list[SeedCapture], block_size: int | None) -> None:
    """A zero-reuse control point (`salt: per-request`) with more than a page cached is not cold."""
    for sc in seeds:
        why = salted_hits(sc.requests, block_size)
        if why is not None:
            point.cache_flags.setdefault(FLAG, f"seed {sc.seed}: {why}")
            if point.cache_state == "cold":
                point.cache_state = "cache-not-cold"


def _add_cache_state(point: Point, seeds: list[SeedCapture], block_size: int | None) -> None:
    """Per seed and for the point: cold, warm-start or cache-not-cold, and why (harness.verdicts.cold)."""
    block = block_size if isinstance(block_size, int) and not isinstance(block_size, bool) else None
    states = []
    flags: dict[str, str] = {}
    for sc in seeds:
        cs = CacheJudgement.model_validate(cache_state(sc.point, sc.requests, block, point.workload_kind))
        point.seeds[str(sc.seed)].cache = cs
        states.append(cs.state)
        for k, why in cs.flags.items():
            flags.setdefault(k, f"seed {sc.seed}: {why}")
    point.block_size = block
    point.cache_state = worst_state(states)
    point.cache_flags = flags


def summarize(dirs: Sequence[Path | str], thresholds: Thresholds | None = None) -> dict[str, Summary]:
    """Capture folders → {node: summary}. Several folders of the same node merge into one summary.

    Verdicts are computed here, once, and the summary keeps the thresholds they used
    (`verdict_thresholds`) and the verdict line (`verdict`), so `harness validate` and the report
    cannot disagree.
    """
    th = thresholds or Thresholds()
    problems = Problems()
    exps = read_captures(dirs, problems)
    by_node: dict[str, list[ExperimentCapture]] = {}
    for e in exps:
        by_node.setdefault(e.node, []).append(e)
    out: dict[str, Summary] = {}
    for node, node_exps in sorted(by_node.items()):
        experiments: dict[str, Experiment] = {}
        points: list[Point] = []
        for e in sorted(node_exps, key=lambda x: x.name):
            entry, pts = summarize_experiment(e, problems, th)
            experiments[e.name] = entry
            points += pts
        summary = Summary(
            schema_version=SCHEMA_VERSION,
            node=node,
            generated_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            generated_on=socket.gethostname(),
            harness_version=__version__,
            sources=[str(Path(d)) for d in dirs],
            experiments=experiments,
            points=points,
            pairs=[Pair.model_validate(pr) for pr in verdicts.pair_verdicts(points, th)],
            verdict_thresholds=dict(asdict(th)),
            notes=[],
            problems=[Problem.model_validate(p) for p in problems if _belongs(p["path"], node_exps, exps)],
        )
        summary.verdict = verdicts.summary_verdict(summary)
        out[node] = summary
    if not out:
        raise HarnessError(f"{', '.join(map(str, dirs))}: no experiment folder with manifest.json found")
    return out


def _belongs(path: str, mine: Iterable[ExperimentCapture], every: Iterable[ExperimentCapture]) -> bool:
    """A problem goes to the node whose experiment folder holds it; one outside every folder goes to all."""
    under = [e for e in every if Path(path).is_relative_to(e.path)]
    return not under or any(e is u for e in mine for u in under)


def write_summaries(summaries: dict[str, Summary], out: Path) -> list[Path]:
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
        write_summary(summaries[node], path)
    return list(targets.values())
