"""What a sweep will do, decided before anything is launched: servers × points × seeds, and the checks.

A plan says, for every server profile, which points are done (their point.json says ok) and which
run; `describe_plan` is the dry run. The checks fail with one line before a server is launched:
unwritable or full capture folder, a model SGLang could not load, a capture of another spec version.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.capture import POINT, experiment_dir, point_dir, point_name
from harness.capture.manifest import check_same_spec, load_manifest
from harness.capture.points import is_done, read_point
from harness.capture.redact import Redactor
from harness.errors import HarnessError
from harness.servers.process import ServerProcess
from harness.servers.replica_launch import plan_gpus, smg_command
from harness.servers.replicas import ReplicaGroup
from harness.servers.server import Server
from harness.spec import ExperimentSpec, Point, load_spec
from harness.spec.engines import engine_of
from harness.spec.servers import ServerProfile, SimSettings
from harness.telemetry.timeline import DEFAULT_INTERVAL_S

DEFAULT_CARD = "l4-8b"


@dataclass
class BenchOptions:
    node: str
    capture: Path = Path("capture")
    summaries: Path = Path("summaries")
    server_kind: str = "sim"  # what `launch: sglang` profiles run as (harness.servers.kind)
    sglang_python: str | None = None  # the interpreter that has SGLang, for profiles without `python:`
    kind_reason: str = ""
    model: str | None = None
    only: list[str] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)  # --server NAME (glob) filters
    retries: int = 2
    time_scale: float | None = None
    card_profile: str | None = None
    quiet: bool = False
    lock_clocks: int | None = None
    telemetry_interval_s: float = (
        0.2  # NVML sampling interval: lower for a prefill-window clock on short prefills
    )
    metrics_interval_s: float = DEFAULT_INTERVAL_S  # the server's /metrics timeline per point; 0: off
    min_free_mb: int = 100
    suite: str | None = (
        None  # the named suite being run: a replicas experiment short of GPUs is skipped, not refused
    )
    argv: list[str] = field(default_factory=list)  # the command line, for the manifest


@dataclass
class PlannedPoint:
    """One point x seed of one server, with its point.json as found (the resume decision)."""

    point: Point
    seed: int
    name: str
    old: dict[str, Any] | None  # point.json before this run, if any

    @property
    def done(self) -> bool:
        return is_done(self.old)


@dataclass
class ServerPlan:
    profile: ServerProfile  # after --server-kind and sim settings
    points: list[PlannedPoint]  # in sweep order, done or not
    # what the server loads, decided at plan time: the profile's model, else --model (an engine that needs one:
    # None when neither names one, which check_model refuses), else the spec's model (the sim's name)
    model: str | None = None
    # a replicas profile: each worker's CUDA_VISIBLE_DEVICES (None entries: no GPU to split), else None
    gpus: list[str | None] | None = None

    @property
    def todo(self) -> list[tuple[Point, int]]:
        return [(p.point, p.seed) for p in self.points if not p.done]

    @property
    def done(self) -> list[str]:  # point names already ok
        return [p.name for p in self.points if p.done]

    @property
    def total(self) -> int:
        return len(self.points)


@dataclass
class ExperimentPlan:
    spec: ExperimentSpec
    servers: list[ServerPlan]
    sim: SimSettings
    skipped: str | None = None  # why the whole experiment is left out (e.g. --only key not swept)
    edir: Path = Path()  # its capture folder: <capture>/<node>/<experiment>

    @property
    def path(self) -> str:
        return str(self.spec.source_path)


# ------------------------------------------------------------------ planning


def load_specs(files: Sequence[Path]) -> list[ExperimentSpec]:
    """Every spec of a run; two with one experiment name would share a capture folder, so they are refused."""
    specs = [load_spec(f) for f in files]
    names = [s.name for s in specs]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise HarnessError(f"--spec: two specs are named {dup!r}; experiment names must be distinct")
    return specs


def resolve_profile(profile: ServerProfile, opts: BenchOptions, sim: SimSettings) -> ServerProfile:
    """`launch: sglang` runs as opts.server_kind; a profile run on the sim gets its card and time scale;
    one run as SGLang on CPU gets the CPU flags and environment (harness.servers.sglang_cpu)."""
    if profile.launch == "sglang" and opts.server_kind in ("sglang", "sglang-cpu"):
        return _as_sglang(profile, opts)
    p = profile.with_launch(opts.server_kind) if profile.launch == "sglang" else profile
    engine = engine_of(p.launch)
    if p.launch != profile.launch and engine is not None and not engine.sglang_args:
        return dataclasses.replace(p, args=())  # SGLang's flags mean nothing to another engine
    if p.launch != "sim":
        return p
    extra: list[str] = []
    have = {a.split("=", 1)[0] for a in p.args}
    card = opts.card_profile or sim.card_profile or DEFAULT_CARD
    ts = opts.time_scale if opts.time_scale is not None else sim.time_scale
    if "--card-profile" not in have:
        extra += ["--card-profile", card]
    if ts is not None and "--time-scale" not in have:
        extra += ["--time-scale", f"{ts:g}"]
    extra += [a for a in sim.args]
    return dataclasses.replace(p, args=(*p.args, *extra))


def _as_sglang(profile: ServerProfile, opts: BenchOptions) -> ServerProfile:
    """The profile as launched on SGLang: its interpreter, and on CPU the flags and env only a CPU run adds."""
    python = profile.python or opts.sglang_python
    if opts.server_kind != "sglang-cpu":
        return dataclasses.replace(profile, python=python)
    from harness.servers.sglang_cpu.flags import cpu_args, cpu_env

    return dataclasses.replace(
        profile,
        python=python,
        args=(*profile.args, *cpu_args(profile.args)),
        env=cpu_env(profile.env),
    )


def select_points(spec: ExperimentSpec, only: list[str]) -> tuple[list[Point], str | None]:
    """Points matching every --only KEY=VALUE; (points, None) or ([], why) when the spec has no such key."""
    points = spec.points()
    for item in only:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise HarnessError(f"--only: expected KEY=VALUE, got {item!r}")
        if key not in spec.sweep:
            return [], f"{key} is not a sweep key here (sweep keys: {', '.join(spec.sweep) or 'none'})"
        points = [p for p in points if str(p.sweep[key]) == value]
        if not points:
            vals = ", ".join(str(v) for v in spec.sweep[key])
            raise HarnessError(f"--only: {spec.source_path}: no point with {key}={value} (values: {vals})")
    return points, None


def plan_points(
    spec: ExperimentSpec, points: list[Point], seeds: Sequence[int], capture: Path, node: str, server: str
) -> list[PlannedPoint]:
    """Every point x seed of one server in sweep order, each with the point.json it left last time."""
    out = []
    for point in points:
        for seed in seeds:
            name = point_name(point.sweep, seed)
            old = read_point(point_dir(capture, node, spec.name, server, name))
            out.append(PlannedPoint(point, seed, name, old))
    return out


def plan_probes(
    spec: ExperimentSpec, seeds: Sequence[int], capture: Path, node: str, server: str
) -> list[PlannedPoint]:
    """A capacity search's plan: the probes already ok (reused), then the next one to run, if any; the
    values after it are chosen as the search goes (harness.sweep.search)."""
    from harness.sweep.search import probe_values

    done, nxt = probe_values(spec, capture, node, server)
    points = [spec.probe_point(v) for v in [*done, *([nxt] if nxt is not None else [])]]
    return plan_points(spec, points, seeds, capture, node, server)


def plan_experiment(spec: ExperimentSpec, opts: BenchOptions) -> ExperimentPlan:
    """Servers × points × seeds of one spec, split into done (point.json ok) and to do."""
    profiles = spec.server_profiles()
    sim = spec.sim_settings()
    points, skipped = select_points(spec, opts.only)
    if opts.servers:
        chosen = [p for p in profiles if any(fnmatch.fnmatchcase(p.name, pat) for pat in opts.servers)]
        if not chosen:
            skipped = (
                skipped
                or f"no server matches --server {' '.join(opts.servers)} (servers: {', '.join(p.name for p in profiles)})"
            )
        profiles = chosen
    plans: list[ServerPlan] = []
    if not skipped:
        for prof in profiles:
            if spec.search is not None:
                planned = plan_probes(spec, spec.seeds, opts.capture, opts.node, prof.name)
            else:
                planned = plan_points(spec, points, spec.seeds, opts.capture, opts.node, prof.name)
            resolved = resolve_profile(prof, opts, sim)
            engine = engine_of(resolved.launch)
            served = engine.served_name_flag if engine is not None else None
            if served and served not in {a.split("=", 1)[0] for a in resolved.args}:
                # requests name the spec's model; the server answers to the same name whatever path it loaded
                resolved = dataclasses.replace(resolved, args=(*resolved.args, served, spec.model))
            try:
                gpus = plan_gpus(resolved) if resolved.replicas is not None else None
            except HarnessError as e:
                if opts.suite is None:  # a spec the user named: refused in one line
                    raise
                skipped, plans = f"{e} (the {opts.suite} suite skips this experiment on this node)", []
                break
            plans.append(ServerPlan(resolved, planned, _model(resolved, spec, opts.model), gpus))
    edir = experiment_dir(opts.capture, opts.node, spec.name)
    return ExperimentPlan(spec, plans, sim, skipped, edir)


def _model(profile: ServerProfile, spec: ExperimentSpec, flag: str | None) -> str | None:
    """What a server loads: an engine that needs a model the profile's or --model; the sim serves the spec's name."""
    if profile.model is not None:
        return profile.model
    engine = engine_of(profile.launch)
    return flag if engine is not None and engine.needs_model else spec.model


def plan_all(specs: list[ExperimentSpec], opts: BenchOptions) -> list[ExperimentPlan]:
    """One plan per spec; a filter (--only, --server) that leaves out every experiment is an error."""
    plans = [plan_experiment(s, opts) for s in specs]
    if opts.only and all(p.skipped for p in plans):
        raise HarnessError(f"--only {' '.join(opts.only)}: {plans[0].skipped}")
    if opts.servers and all(p.skipped for p in plans):
        raise HarnessError(f"--server: {plans[0].skipped}")
    return plans


def server_proc(plan: ExperimentPlan, sp: ServerPlan, redactor: Redactor) -> Server:
    """The (not yet started) process of a server plan: its model, capture folder, redactor and headers;
    a replicas profile's workers and gateway (harness.servers.replicas)."""
    spec = plan.spec
    # a model the engine needs was checked before launch (check_model)
    model = sp.model if sp.model is not None else spec.model
    sdir = plan.edir / sp.profile.name
    try:
        headers = spec.resolved_headers()
    except HarnessError:
        headers = {}
    if sp.profile.replicas is not None:
        return ReplicaGroup(
            sp.profile, sdir, model=model, redactor=redactor, headers=headers, gpus=sp.gpus or None
        )
    return ServerProcess(sp.profile, sdir, model=model, redactor=redactor, headers=headers)


def describe_plan(plans: list[ExperimentPlan], opts: BenchOptions, redactor: Redactor) -> list[str]:
    """The dry-run text: experiments, servers, exact launch lines (port chosen at run time), points."""
    lines: list[str] = []
    for plan in plans:
        spec = plan.spec
        if plan.skipped:
            lines.append(f"experiment {spec.name} ({plan.path}): skipped: {plan.skipped}")
            continue
        lines.append(f"experiment {spec.name} ({plan.path}): {len(plan.servers)} servers, seeds {spec.seeds}")
        prev: Server | None = None
        for sp in plan.servers:
            proc = server_proc(plan, sp, redactor)
            lines += proc.describe(_quote)
            if prev is not None and sp.todo and proc.can_take_workers(prev):
                lines.append(
                    f"    keeps the running workers of {prev.name} (launched alike but for the router)"
                )
            prev = proc if sp.todo else prev
            if sp.profile.env:
                lines.append(
                    f"    env: {' '.join(f'{k}={v}' for k, v in redactor.obj(sp.profile.env).items())}"
                )
            lines.append(f"    runs (point x seed): {sp.total} ({len(sp.done)} done, {len(sp.todo)} to run)")
            if spec.search is not None:  # only the next probe is known before it runs
                se = spec.search
                lines.append(
                    f"    search {se.knob} in [{se.label(se.lo)}, {se.label(se.hi)}]: the points after these "
                    "are chosen as the search goes (docs/capacity.md)"
                )
            for point, seed in sp.todo:
                lines.append(f"      {point_name(point.sweep, seed)}")
    total = sum(len(sp.todo) for p in plans for sp in p.servers)
    done = sum(len(sp.done) for p in plans for sp in p.servers)
    lines.append(
        f"total: {total} runs (point x seed) to run, {done} already ok; capture {opts.capture / opts.node}"
    )
    return lines


def check_router(plans: list[ExperimentPlan]) -> None:
    """A replicas profile needs smg: refused in one line before any server starts."""
    if any(sp.profile.replicas is not None for p in plans if not p.skipped for sp in p.servers):
        smg_command()


def _quote(a: str) -> str:
    return a if a and re.fullmatch(r"[A-Za-z0-9_./:=,+@%{}-]+", a) else json.dumps(a)


# ------------------------------------------------------------------ checks before any launch


def check_writable(folder: Path, what: str, min_free_mb: int) -> None:
    """Fail with one line before a server is launched when we could not write results."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        with open(probe, "w", encoding="utf-8") as fh:
            fh.write("x")
            fh.flush()
            os.fsync(fh.fileno())
        probe.unlink()
    except OSError as e:
        raise HarnessError(
            f"{what} {folder}: not writable ({e.strerror or e}); choose another with --{what}"
        ) from None
    free_mb = shutil.disk_usage(folder).free / 2**20
    if free_mb < min_free_mb:
        raise HarnessError(f"{what} {folder}: only {free_mb:.0f} MB free (need at least {min_free_mb} MB)")


def check_model(plans: list[ExperimentPlan]) -> None:
    """Engines that need a model to load get one; a local path that does not exist is caught before minutes
    are spent."""
    for plan in plans:
        for sp in plan.servers:
            spec_engine = engine_of(sp.profile.launch)
            if spec_engine is None or not spec_engine.needs_model:
                continue
            engine = spec_engine.title
            model = sp.model
            if not model:
                raise HarnessError(
                    f"{plan.path}: server {sp.profile.name} runs {engine}, which needs a model to load: "
                    "give --model PATH (make bench MODEL=PATH), or use --server-kind sim"
                )
            if model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().exists():
                where = "--model" if not sp.profile.model else f"{plan.path}: servers.{sp.profile.name}.model"
                raise HarnessError(f"{where}: {model} does not exist")


def check_traces(specs: Sequence[ExperimentSpec], points: Sequence[Point] | None = None) -> None:
    """Every trace workload's slice read and checked once (bad line → one line, exit 2) before a launch."""
    from harness.spec import TraceWorkload
    from harness.workloads import build_schedule

    for spec in specs:
        seen = set()
        for pt in points if points is not None else spec.points():
            wl = pt.workload
            if isinstance(wl, TraceWorkload) and wl not in seen:
                seen.add(wl)
                build_schedule(spec, wl, spec.seeds[0])


def check_capture_matches(plan: ExperimentPlan, redactor: Redactor) -> None:
    """Refuse to mix results of a changed spec or server into a capture folder that already has points."""
    edir = plan.edir
    manifest = load_manifest(edir)
    check_same_spec(plan.spec, edir, manifest)
    for sp in plan.servers:
        was = (manifest.get("servers") or {}).get(sp.profile.name) or {}
        now = server_proc(plan, sp, redactor).fingerprint()
        if was.get("fingerprint") not in (None, now) and any((edir / sp.profile.name).glob(f"*/{POINT}")):
            raise HarnessError(
                f"{edir / sp.profile.name}: was run with a different server launch ({' '.join(was.get('argv') or [])}); "
                "use another --capture or --node, or remove that folder"
            )
