"""A server's life as a context manager: own session, log file, readiness, its stop signal then SIGKILL.

No orphan ever: every live server is registered for atexit and SIGTERM/SIGHUP, the child asks the
kernel (PR_SET_PDEATHSIG) to be terminated if the harness dies without cleaning up (kill -9).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import functools
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import signals
from harness.capture import METRICS_AFTER, METRICS_BEFORE, SERVER_INFO, SERVER_LOG, write_json_atomic
from harness.capture.manifest import fingerprint
from harness.capture.redact import Redactor
from harness.engines import Adapter, Launch, adapter_for
from harness.errors import HarnessError
from harness.servers.control import NotReady, fetch_metrics, fetch_server_info, flush_cache, wait_ready
from harness.servers.server import LogMark
from harness.spec.flags import storage_backend
from harness.spec.servers import ServerProfile, env_refs, fill_placeholders

_PORT_IN_USE = re.compile(r"address already in use|errno 98|port .* (is )?(already )?in use", re.I)
_LIVE: dict[int, ServerProcess] = {}
_LIVE_LOCK = threading.Lock()
_PR_SET_PDEATHSIG = 1


class ServerError(HarnessError):
    """The server exited, never became ready, or could not be started; the message quotes its log."""


_HANDED_OUT: set[int] = set()  # every port free_port gave in this process
_HANDED_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (bind to 0), chosen at run time, never fixed, and never one this process
    was given before: the OS may hand a just-released port out again, and a gateway got its own
    --prometheus-port as its --port (smg refused to start)."""
    addr = host if host not in ("0.0.0.0", "::") else "127.0.0.1"
    with _HANDED_LOCK:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((addr, 0))
                port = int(s.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise ServerError(f"no free port on {addr} that this run has not used already (100 tries)")


def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    except OSError:
        return None


_LIBC = _libc()


def _child_setup(parent_pid: int) -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the harness died before prctl took effect
            os._exit(1)


class ServerProcess:
    """Start a profile's server on a free port, wait until it serves, stop its whole process group."""

    def __init__(
        self,
        profile: ServerProfile,
        server_dir: Path,
        *,
        model: str | None = None,
        redactor: Redactor | None = None,
        ready_timeout_s: float | None = None,
        stop_grace_s: float = 15.0,
        poll_s: float = 0.1,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.profile = profile
        self.adapter: Adapter = adapter_for(profile)
        self.server_dir = Path(server_dir)
        self.log_path = self.server_dir / SERVER_LOG
        self.model = model or profile.model
        self.redactor = redactor or Redactor()
        for name in env_refs(profile):
            self.redactor.add(os.environ.get(name, ""))
        self.ready_timeout_s = ready_timeout_s or profile.timeout_s
        self.stop_grace_s = stop_grace_s
        self.poll_s = poll_s
        self.headers = dict(headers or {})  # e.g. Authorization for a server started with --api-key
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.launches = 0
        self.points_run = 0  # points run on the current process: the first one finds nothing cached
        self.extra_env: dict[str, str] = {}  # set by the harness over the profile's env (sweep.cold_start)
        self.info: dict[str, Any] | None = None
        self._launch: Launch | None = None
        self._log_start = 0
        self._pump: threading.Thread | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=200)

    # ---------------------------------------------------------------- identity
    @property
    def attached(self) -> bool:
        return self.profile.launch == "attach"

    @property
    def base_url(self) -> str:
        if self.attached:
            return str(self.profile.url).rstrip("/")
        if self.port is None:
            raise ServerError(f"server {self.profile.name}: not started")
        host = self.profile.host if self.profile.host not in ("0.0.0.0", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def argv(self, port: int | None = None) -> list[str]:
        """The exact launch arguments (with secrets; never print or store this, use display_argv)."""
        ln = Launch(
            port=port or self.port or 0, host=self.profile.host, model=self.model, environ=dict(os.environ)
        )
        return self.adapter.argv(self.profile, ln)

    def display_argv(self, port: int | str | None = None) -> list[str]:
        """The launch line safe to print or store: secrets replaced."""
        ln = Launch(port=port or self.port or 0, host=self.profile.host, model=self.model, environ={})
        return self.redactor.argv(self.adapter.argv(self.profile, ln))

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> ServerProcess:
        """Launch (or attach), wait until ready, save server_info.json; raises ServerError with the log tail."""
        if self.attached:
            self._wait_ready()
            self._save_info()
            return self
        for attempt in range(3):
            self._launch_once()
            try:
                self._wait_ready()
            except ServerError:
                tail = "\n".join(self.log_tail(20))
                self.stop()
                if attempt < 2 and _PORT_IN_USE.search(tail):
                    continue  # someone took the port between our check and the bind: pick another
                raise
            break
        self._save_info()
        return self

    @property
    def fresh(self) -> bool:
        """Started and no point run on it yet: its cache is empty without a reset."""
        return self.launches > 0 and self.points_run == 0 and not self.attached

    @property
    def settle_s(self) -> float:
        """How long a point waits after its load for the server's periodic stats line (the adapter's settle_s)."""
        return self.adapter.settle_s(self.profile)

    @property
    def reset_paths(self) -> tuple[str, ...]:
        """The adapter's cache reset endpoint, if the engine has one."""
        return (self.adapter.flush_path,) if self.adapter.flush_path else ()

    def _launch_once(self) -> None:
        self.points_run = 0
        self.server_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.profile.host)
        self._launch = Launch(
            port=self.port, host=self.profile.host, model=self.model, environ=dict(os.environ)
        )
        argv = self.adapter.argv(self.profile, self._launch)
        env = dict(os.environ)
        env.update(self.adapter.env)  # e.g. what the engine needs for its reset endpoint (adapters)
        env.update({k: self._fill_env(v) for k, v in self.profile.env.items()})
        env.update(self.extra_env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - handed to the child / the pump
        self._log_start = log.tell()
        self._tail.clear()
        piped = bool(
            self.redactor.secrets
        )  # a filter between server and file only when there is a secret to hide
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if piped else log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=functools.partial(_child_setup, os.getpid()) if _LIBC is not None else None,
                close_fds=True,
            )
        except OSError as e:
            log.close()
            raise ServerError(
                f"server {self.profile.name}: cannot run {self.display_argv()[0]!r}: {e.strerror or e}"
            ) from None
        self.launches += 1
        with _LIVE_LOCK:
            _LIVE[self.proc.pid] = self
        if piped:
            self._pump = threading.Thread(
                target=self._pump_log, args=(self.proc, log), daemon=True, name="server-log"
            )
            self._pump.start()
        else:
            log.close()  # the child holds its own descriptor (O_APPEND)

    def _fill_env(self, v: str) -> str:
        ln = self._launch
        assert ln is not None
        return fill_placeholders(v, {"port": ln.port, "host": ln.host, "model": ln.model or ""}, ln.environ)

    def _pump_log(self, proc: subprocess.Popen[bytes], log: Any) -> None:
        try:
            assert proc.stdout is not None
            for raw in iter(proc.stdout.readline, b""):
                line = self.redactor.text(raw.decode("utf-8", errors="replace"))
                log.write(line.encode("utf-8"))
        finally:
            log.close()

    def _read_new_log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start)
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _wait_ready(self) -> None:
        ready_line = None if self.attached else self.adapter.effective_ready_line(self.profile)
        url = self.adapter.health_url(self.profile, self.base_url, self._launch)
        line_seen = ready_line is None
        scanned = 0

        def gate() -> str | None:  # before each probe: still running? ready line printed?
            nonlocal line_seen, scanned
            if self.proc is not None and self.proc.poll() is not None:
                raise ServerError(self._why(f"exited with code {self.proc.returncode} before it was ready"))
            if ready_line is not None and not line_seen:
                text = self._read_new_log()
                line_seen = ready_line in text[max(0, scanned - len(ready_line)) :]
                scanned = len(text)
            return None if line_seen else f"no {ready_line!r} line in the log yet"

        try:
            wait_ready(
                url, within_s=self.ready_timeout_s, poll_s=self.poll_s, headers=self.headers, gate=gate
            )
        except NotReady as e:
            what = f"not ready after {self.ready_timeout_s:g}s ({e.why})"
            if self.attached:
                raise ServerError(f"server {self.profile.name} at {self.base_url}: {what}") from None
            raise ServerError(self._why(what)) from None

    def _why(self, what: str) -> str:
        cause = startup_error(self.log_tail(60))
        said = f": {cause}" if cause else ""
        return (
            f"server {self.profile.name} {what}{said}; log {self.log_path}: last lines: {self.quoted_tail()}"
        )

    def _save_info(self) -> None:
        info = fetch_server_info(self.base_url, self.adapter.info_paths, self.headers)
        self.info = self.redactor.obj(info) if info is not None else None
        if self.info is not None:
            self.server_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.server_dir / SERVER_INFO, self.info)

    def alive(self) -> bool:
        """True while the launched process runs (an attached server is assumed alive)."""
        if self.attached:
            return True
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc else None

    def log_size(self) -> int:
        """Bytes in server.log now: where a point's part of the log begins."""
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_mark(self) -> LogMark:
        return (self.log_size(),)

    def log_lines_since(self, mark: LogMark, needle: str) -> list[str]:
        """The lines written since `mark` that contain `needle` (e.g. a replaced kernel's loud line)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(mark[0] if mark else 0)
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return []
        return [ln.strip() for ln in text.splitlines() if needle in ln]

    def exit_cause(self, mark: LogMark) -> str | None:
        """The line that says why the process ended (a startup error's, else its last), since `mark`."""
        lines = self.log_lines_since(mark, "")
        return startup_error(lines) or (lines[-1][:400] if lines else "(nothing in its log)")

    def death(self, tail: bool = True) -> str:
        said = f"server exited with code {self.returncode}"
        return f"{said} during the point; log tail: {self.quoted_tail()}" if tail else said

    def log_tail(self, n: int = 20) -> list[str]:
        """The last n lines this launch wrote to server.log."""
        text = self._read_new_log()
        return [ln for ln in text.splitlines() if ln.strip()][-n:]

    def quoted_tail(self, n: int = 8) -> str:
        """The last n log lines on one line (each cut to 200 characters), for error messages."""
        return " | ".join(t[:200] for t in self.log_tail(n)) or "(log is empty)"

    # ---------------------------------------------------------------- per point (harness.servers.server)
    def flush(self, headers: dict[str, str]) -> tuple[bool | None, str | None]:
        """The adapter's reset endpoint (none known: the point says so)."""
        return flush_cache(self.base_url, headers=headers, paths=self.reset_paths)

    def scrape(self, pdir: Path, when: str, headers: dict[str, str]) -> None:
        fetch_metrics(self.base_url, pdir / (METRICS_BEFORE if when == "before" else METRICS_AFTER), headers)

    def worker_urls(self) -> dict[str, str] | None:
        return None

    def metrics_sources(self) -> dict[str, str]:
        return {"server": self.base_url}

    @property
    def own_pid(self) -> int | None:
        return self.pid

    def fingerprint(self) -> str:
        return server_fingerprint(self)

    def manifest_fields(self) -> dict[str, Any]:
        return {}

    def describe(self, quote: Callable[[str], str]) -> list[str]:
        p = self.profile
        how = (
            f"attach {p.url}"
            if self.attached
            else " ".join(quote(a) for a in self.display_argv(port="{port}"))
        )
        return [f"  server {p.name} [{p.launch}]: {how}"]

    def storage_envs(self) -> list[tuple[dict[str, str], str]]:
        """A launched server with an L3 backend: its own environment gets the new storage directory."""
        if self.attached or storage_backend(list(self.profile.args or self.profile.command or [])) is None:
            return []
        return [(self.extra_env, self.profile.name)]

    def take_workers(self, prev: object) -> bool:
        """One process has no workers to keep from another server: it launches its own."""
        return False

    def can_take_workers(self, prev: object) -> bool:
        return False

    def stop(self) -> None:
        """The engine's stop signal (SIGTERM to the group; SGLang: SIGINT to its launcher), wait, then SIGKILL
        the group; idempotent, safe from signal handlers and atexit."""
        proc = self.proc
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the leader's pid is the group id
        if proc.poll() is None:
            if self.adapter.stop_group:
                _killpg(pgid, self.adapter.stop_signal)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pgid, self.adapter.stop_signal)
            try:
                proc.wait(self.stop_grace_s)
            except subprocess.TimeoutExpired:
                _killpg(pgid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        # children of the leader (e.g. SGLang's scheduler processes) may outlive it
        deadline = time.monotonic() + min(self.stop_grace_s, 5.0)
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(pgid):
            _killpg(pgid, signal.SIGKILL)
        if self._pump is not None:
            self._pump.join(timeout=5)
            self._pump = None
        if proc.stdout is not None:
            with contextlib.suppress(OSError):
                proc.stdout.close()
        with _LIVE_LOCK:
            _LIVE.pop(proc.pid, None)

    def restart(self) -> ServerProcess:
        """Stop whatever is left of the server and start it again on a fresh port."""
        self.stop()
        return self.start()

    def __enter__(self) -> ServerProcess:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


_STARTUP_ERROR = re.compile(
    r"^(?:\[[^\]]*\]\s*)?((?:[A-Za-z_.]*(?:Error|Exception)): .+|[\w .-]+: error: .+)$"
)


def startup_error(lines: list[str]) -> str | None:
    """The line that says why a server refused to start (the last `XError: ...` or argparse `error:`),
    e.g. SGLang's `ValueError: --radix-eviction-policy tlru needs 'threshold' ...`; None when none does."""
    for line in reversed(lines):
        m = _STARTUP_ERROR.match(line.strip())
        if m:
            return m.group(1)[:400]
    return None


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def live_servers() -> list[ServerProcess]:
    with _LIVE_LOCK:
        return list(_LIVE.values())


def stop_all() -> None:
    """Stop every server this process started and has not stopped yet."""
    for s in live_servers():
        with contextlib.suppress(Exception):
            s.stop()


atexit.register(stop_all)


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP unwind `with` blocks as Ctrl-C does, flushing and stopping servers (harness.signals)."""
    signals.install()


def server_fingerprint(proc: ServerProcess) -> str:
    """A short hash of how a server is launched (argv without the interpreter path, env redacted)."""
    argv = proc.display_argv(port="{port}")
    if argv and argv[0] == sys.executable:
        argv = argv[1:]
    return fingerprint(
        {"launch": proc.profile.launch, "argv": argv, "env": proc.redactor.obj(proc.profile.env)}
    )
