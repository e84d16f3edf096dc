"""The sweep orchestrator: servers × sweep points × seeds, each server up for all its points, resumable.

A point whose point.json says ok is skipped. A server that dies during a point gets the point marked
failed with its log tail, is restarted, and the point is retried (`retries` times); the sweep goes on.
Then summarize → report → validate over the node's capture.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fnmatch
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import __version__, runner, validate
from harness.capture import (
    MANIFEST,
    POINT,
    experiment_dir,
    point_dir,
    point_name,
    server_dir,
    write_json_atomic,
)
from harness.errors import HarnessError
from harness.report import write_report
from harness.servers.process import ServerError, ServerProcess
from harness.servers.profiles import ServerProfile, SimSettings, parse_servers, parse_suite
from harness.servers.redact import Redactor, collect_secrets, env_secrets
from harness.spec import ExperimentSpec, Point
from harness.telemetry.gpus import sampling_plan, snapshot
from harness.telemetry.sampler import open_sampler
from harness.workloads import load_prompt_maker

DEFAULT_CARD = "l4-8b"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
Log = Callable[[str], None]


@dataclass
class BenchOptions:
    node: str
    capture: Path = Path("capture")
    summaries: Path = Path("summaries")
    server_kind: str = "sim"  # what `launch: sglang` profiles run as: sglang | sim
    kind_reason: str = ""
    model: str | None = None
    only: list[str] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)  # --server NAME (glob) filters
    retries: int = 2
    time_scale: float | None = None
    card_profile: str | None = None
    quiet: bool = False
    lock_clocks: int | None = None
    min_free_mb: int = 100
    argv: list[str] = field(default_factory=list)  # the command line, for the manifest


@dataclass
class ServerPlan:
    profile: ServerProfile  # after --server-kind and sim settings
    todo: list[tuple[Point, int]]
    done: list[str]  # point names already ok

    @property
    def total(self) -> int:
        return len(self.todo) + len(self.done)


@dataclass
class ExperimentPlan:
    spec: ExperimentSpec
    servers: list[ServerPlan]
    sim: SimSettings
    skipped: str | None = None  # why the whole experiment is left out (e.g. --only key not swept)

    @property
    def path(self) -> str:
        return str(self.spec.source_path)


@dataclass
class Outcome:
    """What a bench run did: point statuses, server failures, restarts."""

    statuses: dict[str, str] = field(default_factory=dict)  # "<exp>/<server>/<point>" -> status
    server_failures: list[str] = field(default_factory=list)
    restarts: int = 0
    skipped_ok: int = 0

    @property
    def not_ok(self) -> int:
        return sum(s != "ok" for s in self.statuses.values()) + len(self.server_failures)


# ------------------------------------------------------------------ planning


def resolve_profile(profile: ServerProfile, opts: BenchOptions, sim: SimSettings) -> ServerProfile:
    """`launch: sglang` runs as opts.server_kind; a profile run on the sim gets its card and time scale."""
    p = profile.with_launch(opts.server_kind) if profile.launch == "sglang" else profile
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


def plan_experiment(spec: ExperimentSpec, opts: BenchOptions) -> ExperimentPlan:
    """Servers × points × seeds of one spec, split into done (point.json ok) and to do."""
    f = str(spec.source_path)
    profiles = parse_servers(spec.servers_raw, spec.matrix_raw, f)
    sim = parse_suite(spec.suite_raw, f)
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
            todo, done = [], []
            for point in points:
                for seed in spec.seeds:
                    name = point_name(point.sweep, seed)
                    old = runner.read_point(point_dir(opts.capture, opts.node, spec.name, prof.name, name))
                    if old and old.get("status") == "ok":
                        done.append(name)
                    else:
                        todo.append((point, seed))
            resolved = resolve_profile(prof, opts, sim)
            if resolved.launch == "sglang" and "--served-model-name" not in {
                a.split("=", 1)[0] for a in resolved.args
            }:
                # requests name the spec's model; SGLang answers to the same name whatever path it loaded
                resolved = dataclasses.replace(
                    resolved, args=(*resolved.args, "--served-model-name", spec.model)
                )
            plans.append(ServerPlan(resolved, todo, done))
    return ExperimentPlan(spec, plans, sim, skipped)


def build_redactor(specs: list[ExperimentSpec]) -> Redactor:
    """Every secret we could write: env credentials, spec values under secret keys, header ${ENV} values."""
    r = Redactor(env_secrets())
    for spec in specs:
        r.add(*collect_secrets(spec.raw))
        for v in spec.headers.values():
            r.add(*(os.environ.get(m.group(1), "") for m in _ENV_REF.finditer(v)))
        with contextlib.suppress(HarnessError):
            r.add(*spec.resolved_headers().values())
    return r


def _server_proc(
    plan: ExperimentPlan, sp: ServerPlan, opts: BenchOptions, redactor: Redactor
) -> ServerProcess:
    spec = plan.spec
    model = sp.profile.model
    if model is None:
        # SGLang loads --model (checked before launch); the sim serves the spec's model name
        model = (opts.model or spec.model) if sp.profile.launch == "sglang" else spec.model
    sdir = server_dir(opts.capture, opts.node, spec.name, sp.profile.name)
    try:
        headers = spec.resolved_headers()
    except HarnessError:
        headers = {}
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
        for sp in plan.servers:
            proc = _server_proc(plan, sp, opts, redactor)
            if sp.profile.launch == "attach":
                how = f"attach {sp.profile.url}"
            else:
                how = " ".join(_quote(a) for a in proc.display_argv(port="{port}"))
            lines.append(f"  server {sp.profile.name} [{sp.profile.launch}]: {how}")
            if sp.profile.env:
                lines.append(
                    f"    env: {' '.join(f'{k}={v}' for k, v in redactor.obj(sp.profile.env).items())}"
                )
            lines.append(f"    points: {sp.total} ({len(sp.done)} done, {len(sp.todo)} to run)")
            for point, seed in sp.todo:
                lines.append(f"      {point_name(point.sweep, seed)}")
    total = sum(len(sp.todo) for p in plans for sp in p.servers)
    done = sum(len(sp.done) for p in plans for sp in p.servers)
    lines.append(f"total: {total} points to run, {done} already ok; capture {opts.capture / opts.node}")
    return lines


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


def check_model(plans: list[ExperimentPlan], opts: BenchOptions) -> None:
    """SGLang needs a model to load, and a local path that does not exist is caught before it spends minutes."""
    for plan in plans:
        for sp in plan.servers:
            if sp.profile.launch != "sglang":
                continue
            model = sp.profile.model or opts.model
            if not model:
                raise HarnessError(
                    f"{plan.path}: server {sp.profile.name} runs SGLang, which needs a model to load: "
                    "give --model PATH (make bench MODEL=PATH), or use --server-kind sim"
                )
            if model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().exists():
                where = "--model" if not sp.profile.model else f"{plan.path}: servers.{sp.profile.name}.model"
                raise HarnessError(f"{where}: {model} does not exist")


def server_fingerprint(proc: ServerProcess) -> str:
    argv = proc.display_argv(port="{port}")
    if argv and argv[0] == sys.executable:
        argv = argv[1:]
    return runner.fingerprint(
        {"launch": proc.profile.launch, "argv": argv, "env": proc.redactor.obj(proc.profile.env)}
    )


def check_capture_matches(plan: ExperimentPlan, opts: BenchOptions, redactor: Redactor) -> None:
    """Refuse to mix results of a changed spec or server into a capture folder that already has points."""
    edir = experiment_dir(opts.capture, opts.node, plan.spec.name)
    manifest = runner.load_manifest(edir)
    runner.check_same_spec(plan.spec, edir, manifest)
    for sp in plan.servers:
        was = (manifest.get("servers") or {}).get(sp.profile.name) or {}
        now = server_fingerprint(_server_proc(plan, sp, opts, redactor))
        if was.get("fingerprint") not in (None, now) and any((edir / sp.profile.name).glob(f"*/{POINT}")):
            raise HarnessError(
                f"{edir / sp.profile.name}: was run with a different server launch ({' '.join(was.get('argv') or [])}); "
                "use another --capture or --node, or remove that folder"
            )


# ------------------------------------------------------------------ manifest


def host_facts() -> dict[str, Any]:
    """CPU, GPUs, driver, Python and SGLang version: what a reader needs to trust the numbers."""
    cpu = platform.processor() or None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        sglang_version: str | None = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        sglang_version = None
    gpus: dict[str, Any]
    try:
        gpus = snapshot()
    except Exception as e:  # noqa: BLE001 - a manifest must be written even when NVML misbehaves
        gpus = {"status": f"no GPU information: {type(e).__name__}: {e}", "gpus": []}
    return {
        "cpu": {"model": cpu, "count": os.cpu_count()},
        "gpus": gpus.get("gpus", []),
        "gpu_status": gpus.get("status"),
        "driver": gpus.get("driver"),
        "sglang_version": sglang_version,
        "python": sys.version.split()[0],
    }


def write_manifest(
    plan: ExperimentPlan, opts: BenchOptions, redactor: Redactor, extra: dict[str, Any]
) -> Path:
    """Create or update manifest.json; every value passes the redactor before it touches the disk."""
    edir = experiment_dir(opts.capture, opts.node, plan.spec.name)
    manifest = runner.load_manifest(edir)
    servers = dict(manifest.get("servers") or {})
    for sp in plan.servers:
        proc = _server_proc(plan, sp, opts, redactor)
        servers[sp.profile.name] = {
            **servers.get(sp.profile.name, {}),
            "launch": sp.profile.launch,
            "engine": sp.profile.engine_name,
            "args": list(sp.profile.args or sp.profile.command),
            "argv": proc.display_argv(port="{port}"),
            "env": sp.profile.env,
            "matrix": sp.profile.matrix,
            "template": sp.profile.template,
            "fingerprint": server_fingerprint(proc),
        }
    now = time.time()
    manifest.update(
        {
            "experiment": plan.spec.name,
            "spec_path": plan.path,
            "spec": plan.spec.raw,
            "spec_fingerprint": runner.spec_fingerprint(plan.spec),
            "harness_version": __version__,
            "git_sha": runner.git_sha(),
            "host": socket.gethostname(),
            "node": opts.node,
            "platform": platform.platform(),
            **host_facts(),
            "servers": servers,
            "bench": {
                "server_kind": opts.server_kind,
                "server_kind_reason": opts.kind_reason,
                "card_profile": opts.card_profile or plan.sim.card_profile or DEFAULT_CARD,
                "time_scale": opts.time_scale if opts.time_scale is not None else plan.sim.time_scale,
                "retries": opts.retries,
                "command": opts.argv,
                "spec_fingerprint": runner.spec_fingerprint(plan.spec),
                **extra,
            },
        }
    )
    manifest.setdefault("start_wall", now)
    manifest.setdefault("start_time", time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)))
    manifest["last_run_wall"] = now
    path = edir / MANIFEST
    write_json_atomic(path, redactor.obj(manifest))
    return path


def _update_server_manifest(plan: ExperimentPlan, opts: BenchOptions, name: str, **fields: Any) -> None:
    edir = experiment_dir(opts.capture, opts.node, plan.spec.name)
    manifest = runner.load_manifest(edir)
    if not manifest:
        return
    manifest.setdefault("servers", {}).setdefault(name, {}).update(fields)
    write_json_atomic(edir / MANIFEST, manifest)


# ------------------------------------------------------------------ running


def _telemetry_factory(profile: ServerProfile) -> Callable[[Path], Any]:
    # a command that runs the sim (engine: sim) has no GPU either
    gpus, reason = sampling_plan("sim" if profile.engine_name == "sim" else profile.launch, profile.env)
    return lambda pdir: open_sampler(pdir, gpus, interval_s=0.2, null_reason=reason)


def _mark_failed(pdir: Path, failure: str) -> None:
    rec = runner.read_point(pdir)
    if rec is None:
        return
    rec["status"] = "failed"
    rec["failure"] = failure
    write_json_atomic(pdir / POINT, rec)


def _wait_exit(proc: ServerProcess, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.05)


def run_server_points(
    plan: ExperimentPlan,
    sp: ServerPlan,
    opts: BenchOptions,
    redactor: Redactor,
    prompt_maker: Any,
    outcome: Outcome,
    log: Log,
) -> None:
    """One server up for all its points; restart and retry when it dies; a dead-for-good server ends its sweep."""
    spec, name = plan.spec, sp.profile.name
    proc = _server_proc(plan, sp, opts, redactor)
    telemetry = _telemetry_factory(sp.profile)
    t0 = time.monotonic()
    try:
        proc.start()
    except ServerError as e:
        outcome.server_failures.append(f"{spec.name}/{name}: {e}")
        log(f"{spec.name}/{name}: server failed to start, its {len(sp.todo)} points were not run: {e}")
        return
    except BaseException:
        proc.stop()
        raise
    try:
        version = (proc.info or {}).get("version")
        _update_server_manifest(plan, opts, name, server_version=version, last_pid=proc.pid)
        log(f"{spec.name}/{name}: ready in {time.monotonic() - t0:.1f}s at {proc.base_url} (pid {proc.pid})")
        for point, seed in sp.todo:
            pname = point_name(point.sweep, seed)
            key = f"{spec.name}/{name}/{pname}"
            pdir = point_dir(opts.capture, opts.node, spec.name, name, pname)
            attempt = runner.next_attempt(pdir, runner.read_point(pdir))
            for tries in range(opts.retries + 1):
                if not proc.alive():
                    log(f"{key}: server {name} is down (exit {proc.returncode}); restarting")
                    proc.restart()
                    outcome.restarts += 1
                rec = runner.run_point(
                    spec,
                    point,
                    seed,
                    base_url=proc.base_url,
                    server_name=name,
                    node=opts.node,
                    capture_root=opts.capture,
                    quiet=opts.quiet,
                    telemetry=telemetry,
                    attempt=attempt,
                    prompt_maker=prompt_maker,
                )
                status = rec.status
                if status != "ok":
                    _wait_exit(proc, 1.0)  # a crash shows as refused connections a moment before the exit
                if not proc.alive():
                    failure = (
                        f"server exited with code {proc.returncode} during the point; "
                        f"log tail: {proc.quoted_tail()}"
                    )
                    _mark_failed(pdir, failure)
                    status = "failed"
                    more = tries < opts.retries
                    log(
                        f"{key}: failed (attempt {attempt}): server exited with code {proc.returncode}"
                        + ("; restarting and retrying" if more else "; no retries left")
                    )
                    if more:
                        proc.restart()
                        outcome.restarts += 1
                        attempt += 1
                        continue
                    break
                log(
                    f"{key}: {status} (attempt {attempt}, {rec.requests_ok}/{rec.requests_scheduled} ok"
                    + (f", {rec.failure}" if rec.failure else "")
                    + ")"
                )
                if status == "failed" and tries < opts.retries:
                    attempt += 1
                    continue
                break
            outcome.statuses[key] = status
    except ServerError as e:
        outcome.server_failures.append(f"{spec.name}/{name}: {e}")
        log(f"{spec.name}/{name}: server could not be restarted; the rest of its points were not run: {e}")
    finally:
        proc.stop()


def run_plans(plans: list[ExperimentPlan], opts: BenchOptions, redactor: Redactor, log: Log) -> Outcome:
    """Every experiment's servers in turn; manifests first, points next, nothing launched before checks pass."""
    outcome = Outcome()
    check_writable(opts.capture, "capture", opts.min_free_mb)
    check_writable(opts.summaries, "summaries", opts.min_free_mb)
    check_model(plans, opts)
    for plan in plans:
        if not plan.skipped:
            check_capture_matches(plan, opts, redactor)
    with _clock_lock(opts) as lock_record:
        extra = {"clock_lock": lock_record} if lock_record is not None else {}
        for plan in plans:
            if plan.skipped:
                log(f"{plan.spec.name}: skipped: {plan.skipped}")
                continue
            write_manifest(plan, opts, redactor, extra)
            maker = load_prompt_maker(plan.spec.tokenizer)
            for sp in plan.servers:
                outcome.skipped_ok += len(sp.done)
                if sp.done:
                    log(f"{plan.spec.name}/{sp.profile.name}: {len(sp.done)} points already ok, skipped")
                if not sp.todo:
                    continue
                try:
                    run_server_points(plan, sp, opts, redactor, maker, outcome, log)
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                        raise HarnessError(
                            f"capture {opts.capture}: {e.strerror} while writing {e.filename or 'results'}; "
                            "run stopped, server stopped; free some space and run the same command to resume"
                        ) from None
                    raise
    return outcome


@contextlib.contextmanager
def _clock_lock(opts: BenchOptions) -> Iterator[dict[str, Any] | None]:
    if opts.lock_clocks is None:
        yield None
        return
    from harness.telemetry.clocks import locked_clocks

    with locked_clocks(opts.lock_clocks) as record:
        yield record


# ------------------------------------------------------------------ stages after the sweep


def run_stages(opts: BenchOptions, log: Log) -> int:
    """summarize → report → validate over capture/<node>; returns how many points or pairs validate flagged."""
    from harness.summarize.summary import summarize, write_summaries  # pandas: loaded only after a sweep

    summaries = summarize([Path(opts.capture) / opts.node])
    for p in write_summaries(summaries, opts.summaries):
        log(f"summary: {p}")
    flagged = 0
    for node, summary in summaries.items():
        written = write_report(summary, opts.summaries, stem=node)
        log(f"report: {written[0]} (+{len(written) - 1} charts)")
        res = validate.validate_summary(summary, source=str(Path(opts.summaries) / f"{node}.json"))
        flagged += int(res["flagged"])
        log(
            f"validate: {node}: {len(res['points'])} points, {len(res['pairs'])} pairs, "
            f"{res['flagged']} flagged"
        )
    return flagged
