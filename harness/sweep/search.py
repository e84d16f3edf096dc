"""A capacity search run through ordinary points: each probe is the spec's point at one knob value × every
seed, run, recorded and resumed exactly as a sweep point is (harness.sweep.bench runs it; `bench` and
`run` alike). Which value comes next and what a probe means is harness.summarize.capacity.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.capture import REQUESTS, point_dir, point_name, read_jsonl
from harness.capture.points import is_done, measured, read_point
from harness.spec import ExperimentSpec, Point
from harness.summarize.capacity import Probe, SeedRun, measure_probe, replay, search_result, seed_run

RunOne = Callable[[Point, int, str], Any]  # (point, seed, point name) -> its PointRecord


def _seed_runs(spec: ExperimentSpec, value: float, capture: Path, node: str, server: str) -> list[SeedRun]:
    out = []
    point = spec.probe_point(value)
    for seed in spec.seeds:
        pdir = point_dir(capture, node, spec.name, server, point_name(point.sweep, seed))
        rows = measured(read_jsonl(pdir / REQUESTS)[0]) if (pdir / REQUESTS).exists() else []
        out.append(seed_run(read_point(pdir), rows))
    return out


def done_probes(spec: ExperimentSpec, capture: Path, node: str, server: str) -> dict[float, Probe]:
    """Probes of this server whose every seed is ok in the capture (what a re-run reuses), walked in the
    search's order until the first that is not."""
    assert spec.search is not None
    found: dict[float, Probe] = {}
    while True:
        _, nxt = replay(spec.search, found)
        if nxt is None:
            return found
        point = spec.probe_point(nxt)
        pdirs = [point_dir(capture, node, spec.name, server, point_name(point.sweep, s)) for s in spec.seeds]
        if not all(is_done(read_point(p)) for p in pdirs):
            return found
        found[nxt] = measure_probe(nxt, _seed_runs(spec, nxt, capture, node, server), spec.search)


def probe_values(
    spec: ExperimentSpec, capture: Path, node: str, server: str
) -> tuple[list[float], float | None]:
    """(values already probed ok, in search order; the next value to probe or None when the search is over)."""
    assert spec.search is not None
    found = done_probes(spec, capture, node, server)
    return list(found), replay(spec.search, found)[1]


def run_search(
    spec: ExperimentSpec,
    capture: Path,
    node: str,
    server: str,
    run_one: RunOne,
    log: Callable[[str], None],
) -> list[Any]:
    """Probe until the search is over: ok probes on disk are reused, the next one run through `run_one`
    for each seed not ok yet; the records of every probe seed, in the order probed."""
    assert spec.search is not None
    search = spec.search
    measured_: dict[float, Probe] = dict(done_probes(spec, capture, node, server))
    records: list[Any] = []
    for v in measured_:
        point = spec.probe_point(v)
        for seed in spec.seeds:
            pdir = point_dir(capture, node, spec.name, server, point_name(point.sweep, seed))
            records.append(read_point(pdir) or {})
    if measured_:
        log(f"{spec.name}/{server}: search: {len(measured_)} probes already ok, reused")
    while True:
        judged, nxt = replay(search, measured_)
        if nxt is None:
            break
        point = spec.probe_point(nxt)
        for seed in spec.seeds:
            name = point_name(point.sweep, seed)
            old = read_point(point_dir(capture, node, spec.name, server, name))
            records.append(old if is_done(old) else run_one(point, seed, name))
        probe = measure_probe(nxt, _seed_runs(spec, nxt, capture, node, server), search)
        measured_[nxt] = probe
        judged, _ = replay(search, measured_)
        p = judged[nxt]
        log(
            f"{spec.name}/{server}: search {search.knob}={search.label(nxt)}: {p.status}"
            + (f" (goodput {p.goodput:.3g})" if p.goodput is not None else "")
            + (f": {p.reason}" if p.reason and p.status != "pass" else "")
        )
    res = search_result(search, replay(search, measured_)[0])
    probes = ", ".join(f"{search.label(p['value'])} {p['status']}" for p in res["probes"])
    log(f"{spec.name}/{server}: search {search.knob}: best {res['best']}; probes {probes}; {res['stopped']}")
    return records
