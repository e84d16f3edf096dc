"""The attach path (`harness run`): every point against a server someone else started, through the sweep loop
of harness.sweep.bench with no restarts and no retries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.capture import experiment_dir, server_dir
from harness.capture.manifest import write_manifest
from harness.capture.records import PointRecord
from harness.capture.redact import spec_redactor
from harness.servers.attached import Attached
from harness.spec import ExperimentSpec, Point
from harness.spec.servers import ServerProfile
from harness.sweep.bench import Log, Outcome, Sweep, sweep_server
from harness.sweep.plan import ServerPlan, plan_points, plan_probes
from harness.sweep.point import Telemetry
from harness.sweep.progress import sweep_progress
from harness.telemetry.sampler import open_sampler
from harness.telemetry.timeline import DEFAULT_INTERVAL_S
from harness.workloads import load_prompt_maker


def attached_telemetry(gpus: str | None) -> Telemetry:
    """Telemetry around each point: the attached server's GPUs are not known, so all unless --gpus."""
    chosen = [g.strip() for g in gpus.split(",") if g.strip()] if gpus else None
    return lambda pdir: open_sampler(pdir, gpus=chosen)


def run_points(
    spec: ExperimentSpec,
    *,
    base_url: str,
    server_name: str,
    node: str,
    capture_root: Path,
    seeds: Sequence[int] | None = None,
    points: list[Point] | None = None,
    quiet: bool = True,
    telemetry: Telemetry | None = None,
    log: Log | None = None,
    metrics_interval_s: float = DEFAULT_INTERVAL_S,
) -> list[PointRecord | dict[str, Any]]:
    """Every point x seed against a running server, in order; skips points already ok, no retries."""
    seeds = list(spec.seeds if seeds is None else seeds)
    if spec.search is not None:  # the search runs each probe for the spec's seeds: these (--seeds)
        spec = dataclasses.replace(spec, seeds=seeds)
        planned = plan_probes(spec, seeds, Path(capture_root), node, server_name)
    else:
        planned = plan_points(
            spec, spec.points() if points is None else points, seeds, Path(capture_root), node, server_name
        )
    sp = ServerPlan(ServerProfile(name=server_name, launch="attach", url=base_url), planned)
    sw = Sweep(
        spec,
        node,
        Path(capture_root),
        quiet,
        telemetry,
        load_prompt_maker(spec.tokenizer),
        0,
        log or (lambda _msg: None),
        metrics_interval_s=metrics_interval_s,
    )
    outcome = Outcome()
    server = Attached(
        base_url, name=server_name, server_dir=server_dir(Path(capture_root), node, spec.name, server_name)
    )
    if sp.todo:  # its info, saved as a launched server's is (the headers: only when points will be sent)
        server.headers, server.redactor = spec.resolved_headers(), spec_redactor([spec])
        server.start()
    with sweep_progress(len(sp.todo), quiet):
        sweep_server(sw, sp, server, outcome)
    return outcome.records


def run_attached(
    spec: ExperimentSpec,
    points: list[Point],
    *,
    server_url: str,
    server_name: str,
    node: str,
    capture: Path,
    seeds: Sequence[int] | None,
    quiet: bool,
    gpus: str | None,
    log: Log,
    metrics_interval_s: float = DEFAULT_INTERVAL_S,
) -> list[PointRecord | dict[str, Any]]:
    """`harness run`: the manifest (refused over points of another spec version), then every point."""
    edir = experiment_dir(capture, node, spec.name)
    write_manifest(edir, spec, node, spec_redactor([spec]), {"server_url_attached": server_url})
    return run_points(
        spec,
        base_url=server_url,
        server_name=server_name,
        node=node,
        capture_root=capture,
        seeds=seeds,
        points=points,
        quiet=quiet,
        telemetry=attached_telemetry(gpus),
        log=log,
        metrics_interval_s=metrics_interval_s,
    )
