"""`harness run SPEC --server-url URL`: every sweep point x seed against a server someone already started.

`--server-log FILE` names that server's log: at the end of the run (also when interrupted) it becomes the
server folder's server.log, so the summary parses it exactly as a launched server's (prefill lines, pools,
each point's slice by its time window).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.commands import options
from harness.errors import HarnessError

if TYPE_CHECKING:
    from harness.capture.redact import Redactor


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0].split(": ", 1)[-1])
    p.add_argument("spec", help="experiment spec (YAML), e.g. workloads/smoke.yaml")
    p.add_argument(
        "--server-url", required=True, help="base URL of the running server, e.g. http://127.0.0.1:30000"
    )
    p.add_argument(
        "--server", default="attached", help="server name for the capture folder (default: attached)"
    )
    options.add_node(p)
    p.add_argument("--capture", default="capture", help="capture root folder (default: capture)")
    p.add_argument("--seeds", help="comma-separated seeds to run instead of the spec's, e.g. 0,1")
    options.add_only(p)
    p.add_argument(
        "--wait-ready",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="wait this long for the server to answer (some engines open their port only once ready; "
        "default 5, 0 = fail at once); a 503 from /health is waited for at least 300 s",
    )
    p.add_argument(
        "--server-log",
        type=Path,
        metavar="FILE",
        help="the attached server's log file, read at the end of the run as a launched server's log "
        "(prefill lines, pools; each point's window)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    options.add_metrics_interval(p)
    options.add_workers(p)
    p.add_argument(
        "--gpus",
        default=None,
        help="GPUs the attached server uses, for telemetry: comma list of CUDA indices or UUIDs "
        "(default: every GPU NVML sees; without NVML the capture says why there are no samples)",
    )
    return p


def _parse_seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise HarnessError(f"--seeds: expected comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds):
        raise HarnessError(f"--seeds: expected non-negative integers, got {text!r}")
    return seeds


def check_server_log(path: Path | None) -> None:
    """A missing or unreadable --server-log is bad input: one line before the server is touched."""
    if path is None:
        return
    if not path.exists():
        raise HarnessError(f"--server-log: {path}: no such file")
    if not path.is_file():
        raise HarnessError(f"--server-log: {path}: not a file")
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as e:
        raise HarnessError(f"--server-log: {path}: cannot read: {e.strerror or e}") from None


def copy_server_log(src: Path, server_dir: Path, redactor: Redactor) -> Path | None:
    """The attached server's log as this server folder's server.log (secrets redacted, as a launched
    server's are); None, with the reason printed, if it could not be read now."""
    from harness.capture import SERVER_LOG

    dst = server_dir / SERVER_LOG
    server_dir.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    try:
        with src.open("rb") as fin, tmp.open("wb") as fout:
            for raw in fin:
                fout.write(redactor.text(raw.decode("utf-8", errors="replace")).encode("utf-8"))
    except OSError as e:
        print(f"--server-log: {src}: cannot read: {e.strerror or e}; no server log kept", file=sys.stderr)
        return None
    tmp.replace(dst)
    return dst


def run(args: argparse.Namespace) -> int:
    from harness.servers.control import check_server
    from harness.servers.process import install_signal_handlers
    from harness.spec import load_spec
    from harness.sweep.attach import run_attached
    from harness.sweep.plan import check_traces, check_writable, select_points

    spec = options.with_workers(load_spec(args.spec), args.workers)
    seeds = _parse_seeds(args.seeds)
    points, why = select_points(spec, args.only)
    if why:
        raise HarnessError(f"--only: {spec.source_path}: {why}")
    check_writable(Path(args.capture), "capture", min_free_mb=100)  # one line, before the server is touched
    check_traces([spec], points)
    check_server_log(args.server_log)
    if args.wait_ready < 0:
        raise HarnessError(f"--wait-ready: expected seconds >= 0, got {args.wait_ready:g}")
    check_server(args.server_url, wait_ready_s=args.wait_ready)
    install_signal_handlers()  # SIGTERM/SIGHUP act as Ctrl-C: in-flight requests recorded, point.json written
    capture = Path(args.capture)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr if args.quiet else sys.stdout, flush=True)

    exp = capture / args.node / spec.name / args.server
    try:
        recs = run_attached(
            spec,
            points,
            server_url=args.server_url,
            server_name=args.server,
            node=args.node,
            capture=capture,
            seeds=seeds,
            quiet=args.quiet,
            gpus=args.gpus,
            log=log,
            metrics_interval_s=options.check_metrics_interval(args.metrics_interval_s),
        )
    finally:
        if args.server_log is not None:
            from harness.capture.redact import spec_redactor

            kept = copy_server_log(args.server_log, exp, spec_redactor([spec]))
            if kept is not None:
                log(f"server log: {args.server_log} -> {kept}")
    statuses = [r.status if hasattr(r, "status") else r.get("status") for r in recs]
    bad = [s for s in statuses if s != "ok"]
    print(f"{len(statuses) - len(bad)}/{len(statuses)} points ok -> {exp}", flush=True)
    return 1 if bad else 0
