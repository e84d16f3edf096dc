"""The sweep loop: each server up for all its points × seeds, resumable (the stages after it: pipeline.py).

A point whose point.json says ok is skipped. A server that dies during a point gets the point marked
failed with its log tail, is restarted, and the point is retried (`retries` times); the sweep goes on.
`harness run` is the attach path through the same loop: a server someone else started, no restarts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.capture import point_dir
from harness.capture.manifest import (
    load_manifest,
    record_server,
    spec_fingerprint,
    write_manifest,
)
from harness.capture.points import mark_failed, next_attempt, read_point
from harness.capture.records import PointRecord
from harness.capture.redact import Redactor
from harness.engines import no_gpu
from harness.errors import HarnessError
from harness.servers.process import ServerError
from harness.servers.server import LogMark, Server
from harness.spec import ExperimentSpec, Point
from harness.spec.servers import ServerProfile
from harness.sweep.cold_start import cold_storage_point, flush_killed, prepare_cold_storage
from harness.sweep.plan import (
    DEFAULT_CARD,
    BenchOptions,
    ExperimentPlan,
    ServerPlan,
    check_capture_matches,
    check_model,
    check_router,
    check_traces,
    check_writable,
    server_proc,
)
from harness.sweep.point import Telemetry, run_point
from harness.sweep.progress import point_done, sweep_progress
from harness.telemetry.gpus import host_facts, sampling_plan
from harness.telemetry.sampler import open_sampler
from harness.telemetry.timeline import DEFAULT_INTERVAL_S
from harness.workloads import PromptMaker, load_prompt_maker

Log = Callable[[str], None]


@dataclass
class Outcome:
    """What a sweep did: point statuses, server failures, restarts, and the records of every point."""

    statuses: dict[str, str] = field(default_factory=dict)  # "<exp>/<server>/<point>" -> status
    server_failures: list[str] = field(default_factory=list)
    restarts: int = 0
    skipped_ok: int = 0
    records: list[PointRecord | dict[str, Any]] = field(default_factory=list)  # run or found ok, in order

    @property
    def not_ok(self) -> int:
        return sum(s != "ok" for s in self.statuses.values()) + len(self.server_failures)


@dataclass
class Sweep:
    """What every point of one server shares."""

    spec: ExperimentSpec
    node: str
    capture: Path
    quiet: bool
    telemetry: Telemetry | None
    prompt_maker: PromptMaker
    retries: int
    log: Log
    telemetry_interval_s: float = 0.2
    metrics_interval_s: float = DEFAULT_INTERVAL_S  # the /metrics timeline (harness.telemetry.timeline)


# ------------------------------------------------------------------ the loop


def sweep_server(sw: Sweep, sp: ServerPlan, server: Server, outcome: Outcome) -> None:
    """Every planned point of one server in sweep order: skip the done, run the rest with retries."""
    name = sp.profile.name
    if sw.spec.search is not None:  # a capacity search: the points are chosen as it goes
        _search_server(sw, name, server, outcome)
        return
    for item in sp.points:
        if item.done:
            if server.attached:
                sw.log(f"{name} {item.name}: already ok, skipped")
            outcome.records.append(_as_record(item.old))
            continue
        status, rec = _run_with_retries(sw, name, item.point, item.seed, item.name, server, outcome)
        outcome.statuses[f"{sw.spec.name}/{name}/{item.name}"] = status
        outcome.records.append(rec)
        point_done()


def _search_server(sw: Sweep, name: str, server: Server, outcome: Outcome) -> None:
    """A capacity search's probes on one server, each an ordinary point run with retries (sweep.search)."""
    from harness.sweep.search import run_search

    def run_one(point: Point, seed: int, pname: str) -> PointRecord:
        status, rec = _run_with_retries(sw, name, point, seed, pname, server, outcome)
        outcome.statuses[f"{sw.spec.name}/{name}/{pname}"] = status
        point_done()
        return rec

    for rec in run_search(sw.spec, sw.capture, sw.node, name, run_one, sw.log):
        outcome.records.append(rec if isinstance(rec, PointRecord) else _as_record(rec))


def _run_with_retries(
    sw: Sweep,
    name: str,
    point: Point,
    seed: int,
    pname: str,
    server: Server,
    outcome: Outcome,
) -> tuple[str, PointRecord]:
    """One point, retried while attempts are left: a dead server is restarted, a failed point re-run."""
    spec = sw.spec
    key = f"{spec.name}/{name}/{pname}"
    pdir = point_dir(sw.capture, sw.node, spec.name, name, pname)
    attempt = next_attempt(pdir, read_point(pdir))
    for tries in range(sw.retries + 1):
        if not server.alive():
            sw.log(f"{key}: server {name} is down (exit {server.returncode}); restarting")
            server.restart()
            outcome.restarts += 1
        cold = cold_storage_point(server)  # L3 servers: a fresh server on an empty directory, no flush
        log_at = server.log_mark()
        rec = run_point(
            spec,
            point,
            seed,
            server=server,
            server_name=name,
            node=sw.node,
            capture_root=sw.capture,
            quiet=sw.quiet,
            telemetry=sw.telemetry,
            attempt=attempt,
            prompt_maker=sw.prompt_maker,
            cold_note=cold,
            metrics_interval_s=sw.metrics_interval_s,
        )
        server.points_run += 1
        status = rec.status
        replaced = _replaced_kernel_calls(server, log_at)
        if replaced:  # SGLang on CPU reached a kernel that has no CPU build: not what SGLang would do
            failure = f"SGLang called a kernel replaced for the CPU run: {replaced[0]}"
            mark_failed(pdir, failure)
            sw.log(f"{key}: failed (attempt {attempt}): {failure}")
            return "failed", rec
        if status != "ok" and not server.attached:  # an attached server is always taken to be up
            _wait_exit(server, 1.0)  # a crash shows as refused connections a moment before the exit
        if not server.alive():
            failure = flush_killed(server, rec, log_at) or server.death()
            mark_failed(pdir, failure, server_died=True, exit_code=server.returncode)
            status = "failed"
            more = tries < sw.retries
            sw.log(
                f"{key}: failed (attempt {attempt}): {server.death(tail=False)}"
                + ("; restarting and retrying" if more else "; no retries left")
            )
            if more:
                server.restart()
                outcome.restarts += 1
                attempt += 1
                continue
            break
        if not server.attached:
            sw.log(
                f"{key}: {status} (attempt {attempt}, {rec.requests_ok}/{rec.requests_scheduled} ok"
                + (f", {rec.failure}" if rec.failure else "")
                + ")"
            )
        else:
            sw.log(f"{name} {pname}: {rec.status} ({rec.requests_ok} ok, {rec.requests_failed} failed)")
        if status == "failed" and tries < sw.retries:
            attempt += 1
            continue
        break
    return status, rec


def _replaced_kernel_calls(server: Server, mark: LogMark) -> list[str]:
    """Lines a CPU stand-in printed during the point (harness.servers.sglang_cpu): each is a failed point."""
    from harness.servers.sglang_cpu import SHIM_MARK

    return server.log_lines_since(mark, f"{SHIM_MARK}: kernel")


def _as_record(old: dict[str, Any] | None) -> PointRecord | dict[str, Any]:
    try:
        return PointRecord(**(old or {}))
    except TypeError:  # written by another harness version: keep it as it is
        return old or {}


def _wait_exit(proc: Server, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.05)


# ------------------------------------------------------------------ launch path (`harness bench`)


def _telemetry_factory(
    profile: ServerProfile, split: list[str | None] | None = None, interval_s: float = 0.2
) -> Telemetry:
    # an engine that never uses a GPU (the sim, launched or as a command's engine) has none to sample; a
    # replicas profile samples its workers' GPUs; a command's own argument list counts too (`transformers
    # serve … --device cpu` has no GPU to watch)
    gpus, reason = sampling_plan(no_gpu(profile), profile.env, [*profile.args, *profile.command])
    if split and any(split):
        gpus = [g for part in split if part for g in part.split(",")]
    return lambda pdir: open_sampler(pdir, gpus, interval_s=interval_s, null_reason=reason)


def write_bench_manifest(
    plan: ExperimentPlan, opts: BenchOptions, redactor: Redactor, extra: dict[str, Any]
) -> Path:
    """The experiment's manifest as bench writes it: host facts, every server's launch, bench settings."""
    edir = plan.edir
    servers = dict(load_manifest(edir).get("servers") or {})
    for sp in plan.servers:
        proc = server_proc(plan, sp, redactor)
        servers[sp.profile.name] = {
            **servers.get(sp.profile.name, {}),
            "launch": sp.profile.launch,
            "engine": sp.profile.engine_name,
            "args": list(sp.profile.args or sp.profile.command),
            "argv": proc.display_argv(port="{port}"),
            "env": sp.profile.env,
            "matrix": sp.profile.matrix,
            "template": sp.profile.template,
            "fingerprint": proc.fingerprint(),
            **proc.manifest_fields(),
        }
    fields = {
        **host_facts(),
        "servers": servers,
        "bench": {
            "server_kind": opts.server_kind,
            "server_kind_reason": opts.kind_reason,
            "card_profile": opts.card_profile or plan.sim.card_profile or DEFAULT_CARD,
            "time_scale": opts.time_scale if opts.time_scale is not None else plan.sim.time_scale,
            "retries": opts.retries,
            "command": opts.argv,
            "spec_fingerprint": spec_fingerprint(plan.spec),
            **extra,
        },
    }
    return write_manifest(edir, plan.spec, opts.node, redactor, fields)


def run_server_points(
    plan: ExperimentPlan,
    sp: ServerPlan,
    sw: Sweep,
    redactor: Redactor,
    outcome: Outcome,
    carried: Server | None = None,
) -> Server | None:
    """One server up for all its points; restart and retry when it dies; a dead-for-good server ends its sweep.

    `carried`: the previous server of the experiment, still running: its workers are kept where this
    server's are launched the same (Server.take_workers: replicas differing only in router policy), else
    it is stopped first. Returns this server still running for the next one (the caller stops it), or None.
    """
    spec, name, log = plan.spec, sp.profile.name, sw.log
    proc = server_proc(plan, sp, redactor)
    t0 = time.monotonic()
    kept = False
    try:
        kept = carried is not None and proc.take_workers(carried)
        if carried is not None and not kept:
            carried.stop()  # before this launch: its GPUs and memory are the next server's
        if not kept:
            prepare_cold_storage(proc)
            proc.start()
    except ServerError as e:
        outcome.server_failures.append(f"{spec.name}/{name}: {e}")
        log(f"{spec.name}/{name}: server failed to start, its {len(sp.todo)} points were not run: {e}")
        return None
    except BaseException:
        proc.stop()
        raise
    finally:
        if carried is not None and not kept:  # whatever stopped this launch: nothing of it left running
            carried.stop()
    done = False
    try:
        version = (proc.info or {}).get("version")
        record_server(plan.edir, name, server_version=version, last_pid=proc.pid)
        how = f"; the workers of {carried.name if carried else ''} kept, only the gateway new" if kept else ""
        log(
            f"{spec.name}/{name}: ready in {time.monotonic() - t0:.1f}s at {proc.base_url} (pid {proc.pid}){how}"
        )
        sweep_server(
            dataclasses.replace(
                sw, telemetry=_telemetry_factory(sp.profile, sp.gpus, sw.telemetry_interval_s)
            ),
            sp,
            proc,
            outcome,
        )
        done = True
    except ServerError as e:
        outcome.server_failures.append(f"{spec.name}/{name}: {e}")
        log(f"{spec.name}/{name}: server could not be restarted; the rest of its points were not run: {e}")
    finally:
        if not (done and proc.alive()):
            proc.stop()
    return proc if done and proc.alive() else None


def run_plans(plans: list[ExperimentPlan], opts: BenchOptions, redactor: Redactor, log: Log) -> Outcome:
    """Every experiment's servers in turn; manifests first, points next, nothing launched before checks pass."""
    outcome = Outcome()
    check_writable(opts.capture, "capture", opts.min_free_mb)
    check_writable(opts.summaries, "summaries", opts.min_free_mb)
    check_model(plans)
    check_router(plans)
    check_traces([p.spec for p in plans if not p.skipped])
    for plan in plans:
        if not plan.skipped:
            check_capture_matches(plan, redactor)
    todo = sum(len(sp.todo) for plan in plans if not plan.skipped for sp in plan.servers)
    with _clock_lock(opts.lock_clocks) as lock_record, sweep_progress(todo, opts.quiet):
        extra = {"clock_lock": lock_record} if lock_record is not None else {}
        for plan in plans:
            if plan.skipped:
                log(f"{plan.spec.name}: skipped: {plan.skipped}")
                continue
            write_bench_manifest(plan, opts, redactor, extra)
            _run_servers(plan, _sweep(plan.spec, opts, log), opts, redactor, outcome)
    return outcome


def _run_servers(
    plan: ExperimentPlan, sw: Sweep, opts: BenchOptions, redactor: Redactor, outcome: Outcome
) -> None:
    """An experiment's servers in turn, each handing its running server to the next (run_server_points)."""
    carried: Server | None = None
    try:
        for sp in plan.servers:
            outcome.skipped_ok += len(sp.done)
            if sp.done:
                sw.log(f"{plan.spec.name}/{sp.profile.name}: {len(sp.done)} runs already ok, skipped")
            if not sp.todo:
                continue
            try:
                held, carried = carried, None  # run_server_points keeps it or stops it, even on a raise
                carried = run_server_points(plan, sp, sw, redactor, outcome, held)
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                    raise HarnessError(
                        f"capture {opts.capture}: {e.strerror} while writing {e.filename or 'results'}; "
                        "run stopped, server stopped; free some space and run the same command to resume"
                    ) from None
                raise
    finally:
        if carried is not None:
            carried.stop()


def _sweep(spec: ExperimentSpec, opts: BenchOptions, log: Log, retries: int | None = None) -> Sweep:
    """What every server of one experiment shares (telemetry is set per server)."""
    retries = opts.retries if retries is None else retries
    maker = load_prompt_maker(spec.tokenizer)
    return Sweep(
        spec,
        opts.node,
        opts.capture,
        opts.quiet,
        None,
        maker,
        retries,
        log,
        opts.telemetry_interval_s,
        opts.metrics_interval_s,
    )


def sweep_started(
    plan: ExperimentPlan,
    sp: ServerPlan,
    server: Server,
    opts: BenchOptions,
    log: Log,
    outcome: Outcome,
) -> None:
    """Every point of `sp` on a server the caller started and stops, once each: no retries, no restart,
    no telemetry (a warm re-run under a second server name on the same process: realserver's suites)."""
    sweep_server(_sweep(plan.spec, opts, log, retries=0), sp, server, outcome)


@contextlib.contextmanager
def _clock_lock(mhz: int | None) -> Iterator[dict[str, Any] | None]:
    if mhz is None:
        yield None
        return
    from harness.telemetry.clocks import locked_clocks

    with locked_clocks(mhz) as record:
        yield record
