"""N workers and SGLang's gateway (smg) as one server: started, probed, flushed and stopped together.

Each worker is an ordinary ServerProcess (own port, process group, log and server_info under
`workers/w<i>/`); the gateway is one more, launched with `--worker-urls` and a free `--prometheus-port`,
ready once its `/workers` lists every worker healthy. The sweep talks to the gateway's URL; a point reads
each worker's `/metrics` and the gateway's, and names the worker that died when one does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.capture import (
    METRICS_AFTER,
    METRICS_BEFORE,
    REPLICAS,
    ROUTER_METRICS_AFTER,
    ROUTER_METRICS_BEFORE,
    WORKERS_DIR,
    write_json_atomic,
)
from harness.capture.manifest import fingerprint
from harness.capture.redact import Redactor
from harness.engines import RESET_PATHS, no_gpu
from harness.errors import HarnessError
from harness.servers.control import fetch_metrics, flush_cache
from harness.servers.process import ServerError, ServerProcess, free_port, server_fingerprint
from harness.servers.server import LogMark
from harness.spec.flags import storage_backend
from harness.spec.servers import ServerProfile
from harness.telemetry.gpus import sampling_plan

SMG_VERSION = "1.13.0"  # the gateway the `router` extra pins; its policies: harness.spec.replicas
REPLICAS_FILE = REPLICAS  # in the server folder: workers, their URLs per launch, the gateway's line
ROUTER_DIR = "router"
# smg keeps listening 5 s after SIGTERM for a load balancer in front (drain_settle_secs; `smg launch` has no
# flag for it): the harness's gateway has none and nothing in flight when stopped, so 1 s, then SIGKILL
GATEWAY_STOP_GRACE_S = 1.0
ROUTER_METRICS = {"before": ROUTER_METRICS_BEFORE, "after": ROUTER_METRICS_AFTER}
_TP_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size")


def smg_command() -> str:
    """The gateway binary: $HARNESS_SMG, else the one beside this interpreter (the venv's), else on PATH."""
    env = os.environ.get("HARNESS_SMG")
    if env:
        return env
    beside = Path(sys.executable).parent / "smg"
    if beside.exists():
        return str(beside)
    found = shutil.which("smg")
    if found:
        return found
    raise HarnessError(
        f"replicas: need SGLang's gateway `smg` ({SMG_VERSION}): pip install 'harness[router]' "
        "(or set HARNESS_SMG to its path)"
    )


def _smg_display() -> str:
    """The gateway binary for a printed line: found, or its bare name (a dry run needs no smg)."""
    try:
        return smg_command()
    except HarnessError:
        return "smg"


def worker_name(i: int) -> str:
    return f"w{i}"


def tp_size(args: tuple[str, ...]) -> int:
    """GPUs one worker takes: its tensor-parallel size (1 unless a flag says otherwise)."""
    for i, a in enumerate(args):
        flag, eq, val = a.partition("=")
        if flag in _TP_FLAGS:
            raw = val if eq else (args[i + 1] if i + 1 < len(args) else "1")
            try:
                return max(1, int(raw))
            except ValueError:
                return 1
    return 1


def gpu_split(profile: ServerProfile, visible: list[str] | None) -> list[str | None]:
    """Each worker's CUDA_VISIBLE_DEVICES: consecutive slices of the GPUs the profile may use (None: no
    GPU to split, e.g. the sim or a CPU run); refused in one line when replicas x tp exceed them."""
    n = int(profile.replicas or 1)
    if visible is None:
        return [None] * n
    tp = tp_size(profile.args)
    if n * tp > len(visible):
        raise HarnessError(
            f"server {profile.name}: replicas {n} x tensor parallel {tp} needs {n * tp} GPUs; "
            f"{len(visible)} visible ({', '.join(visible) or 'none'})"
        )
    return [",".join(visible[i * tp : (i + 1) * tp]) for i in range(n)]


def plan_gpus(profile: ServerProfile) -> list[str | None]:
    """Each worker's GPUs at plan time: the profile's visible GPUs (all NVML sees when it names none) split
    by replicas x tensor parallel; the sim and CPU runs get None each."""
    selectors, _reason = sampling_plan(no_gpu(profile), profile.env, profile.args)
    if selectors == []:
        return gpu_split(profile, None)
    return gpu_split(profile, selectors if selectors is not None else _nvml_indices())


def _nvml_indices() -> list[str]:
    """Every GPU NVML sees, by index ([] without NVML or a driver)."""
    from harness.telemetry import nvml

    nv, _why = nvml.load()
    if nv is None or nvml.init(nv) is not None:
        return []
    try:
        return [str(i) for i in range(int(nv.nvmlDeviceGetCount()))]
    except Exception:
        return []
    finally:
        nvml.shutdown(nv)


def worker_profile(profile: ServerProfile, i: int, gpus: str | None) -> ServerProfile:
    """Worker i of a replicas profile: the same launch, its own GPUs; no router keys."""
    env = dict(profile.env)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return dataclasses.replace(
        profile, name=f"{profile.name}/{worker_name(i)}", replicas=None, router=None, env=env
    )


def router_argv(
    profile: ServerProfile, urls: list[str], port: int | str, prom_port: int | str, binary: str | None = None
) -> list[str]:
    """The gateway's launch line: the profile's host, the workers, the policy and flags of `router:`."""
    assert profile.router is not None
    host = profile.host
    return [
        binary or smg_command(),
        "launch",
        "--host",
        host,
        "--port",
        str(port),
        "--worker-urls",
        *urls,
        "--prometheus-host",
        host,
        "--prometheus-port",
        str(prom_port),
        *profile.router.argv(),
    ]


class ReplicaGroup:
    """A replicas profile's workers and gateway, with the interface the sweep uses for one server."""

    def __init__(
        self,
        profile: ServerProfile,
        server_dir: Path,
        *,
        model: str | None = None,
        redactor: Redactor | None = None,
        headers: dict[str, str] | None = None,
        gpus: list[str | None] | None = None,
    ) -> None:
        self.profile = profile
        self.server_dir = Path(server_dir)
        self.model = model
        self.redactor = redactor or Redactor()
        self.headers = dict(headers or {})
        n = int(profile.replicas or 1)
        split = gpus or [None] * n
        self.workers = [
            ServerProcess(
                worker_profile(profile, i, split[i]),
                self.server_dir / WORKERS_DIR / worker_name(i),
                model=model,
                redactor=self.redactor,
                headers=self.headers,
            )
            for i in range(n)
        ]
        self.gateway: ServerProcess | None = None
        self.prom_port: int | None = None
        self.launches = 0
        self.points_run = 0
        self.extra_env: dict[str, str] = {}  # every worker's (sweep.cold_start: a shared L3 directory)
        self.worker_env: list[dict[str, str]] = [{} for _ in range(n)]  # one worker's own (its L3 directory)
        self.info: dict[str, Any] | None = None

    # ---------------------------------------------------------------- identity
    @property
    def attached(self) -> bool:
        return False

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def members(self) -> list[ServerProcess]:
        return [*self.workers, *([self.gateway] if self.gateway is not None else [])]

    @property
    def base_url(self) -> str:
        if self.gateway is None:
            raise ServerError(f"server {self.profile.name}: not started")
        return self.gateway.base_url

    @property
    def pid(self) -> int | None:
        return self.gateway.pid if self.gateway else None

    def worker_urls(self) -> dict[str, str] | None:
        """worker name -> its URL as the gateway names it (the routed-worker header's value)."""
        return {worker_name(i): w.base_url for i, w in enumerate(self.workers) if w.port is not None}

    def metrics_sources(self) -> dict[str, str]:
        """Every worker and, once it serves them, the gateway's own counters."""
        out = dict(self.worker_urls() or {})
        if self.prom_port is not None:
            out["gateway"] = f"http://{self.profile.host}:{self.prom_port}"
        return out

    @property
    def own_pid(self) -> int | None:
        return None  # N engines behind a gateway: no one process to dump

    def display_argv(self, port: int | str | None = None) -> list[str]:
        """Worker 0's launch line (every worker's is the same but for its port and GPUs)."""
        return self.workers[0].display_argv(port=port)

    def router_display_argv(self) -> list[str]:
        urls = [f"http://{self.profile.host}:{{port{i}}}" for i in range(len(self.workers))]
        return self.redactor.argv(
            router_argv(self.profile, urls, "{port}", "{prometheus_port}", _smg_display())
        )

    @property
    def policy(self) -> str:
        return self.profile.router.policy if self.profile.router else "cache_aware"

    def fingerprint(self) -> str:
        """How the group is launched: the workers' line, their count, and the gateway's policy and flags."""
        argv = self.router_display_argv()[1:]
        return fingerprint(
            {"worker": server_fingerprint(self.workers[0]), "n": len(self.workers), "router": argv}
        )

    def manifest_fields(self) -> dict[str, Any]:
        """What the manifest adds for a group: the count, the policy, the gateway's line, the storage mode."""
        return {
            "replicas": len(self.workers),
            "router_policy": self.policy,
            "router_argv": self.router_display_argv(),
            "storage": self.profile.storage,
        }

    def describe(self, quote: Callable[[str], str]) -> list[str]:
        """The dry run's lines: each worker's launch, then the gateway's."""
        p = self.profile
        out = [
            f"  server {p.name} [{p.launch}] x{len(self.workers)} behind smg ({self.policy}, storage {p.storage}):"
        ]
        for i, w in enumerate(self.workers):
            gpus = w.profile.env.get("CUDA_VISIBLE_DEVICES")
            line = " ".join(quote(a) for a in w.display_argv(port=f"{{port{i}}}"))
            out.append(f"    worker w{i}{f' (GPUs {gpus})' if gpus else ''}: {line}")
        out.append(f"    gateway: {' '.join(quote(a) for a in self.router_display_argv())}")
        return out

    def storage_envs(self) -> list[tuple[dict[str, str], str]]:
        """With an L3 backend: one new directory per worker, or with `storage: shared` one for all."""
        if storage_backend(list(self.profile.args or self.profile.command or [])) is None:
            return []
        if self.profile.storage == "shared":
            return [(self.extra_env, self.profile.name)]
        return [(env, f"{self.profile.name}-{worker_name(i)}") for i, env in enumerate(self.worker_env)]

    # ---------------------------------------------------------------- the point's log slices
    def log_mark(self) -> LogMark:
        """Where the point begins in every worker's log."""
        return tuple(w.log_size() for w in self.workers)

    def log_lines_since(self, mark: LogMark, needle: str) -> list[str]:
        """Each worker's lines since its mark that contain `needle`, prefixed with the worker."""
        return [
            f"{worker_name(i)}: {ln}"
            for i, w in enumerate(self.workers)
            for ln in w.log_lines_since(mark[i : i + 1], needle)
        ]

    def exit_cause(self, mark: LogMark) -> str | None:
        return None  # which member went down says more (death)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> ReplicaGroup:
        """Every worker (in turn: N model loads at once would race for the host's memory), then the
        gateway; ready when the gateway lists every worker healthy. Raises ServerError naming the member."""
        try:
            for i, w in enumerate(self.workers):
                w.extra_env = {**self.extra_env, **self.worker_env[i]}
                w.start()
            self._start_gateway()
        except BaseException:
            self.stop()
            raise
        self.launches += 1
        self.points_run = 0
        self.info = self.workers[0].info
        self._record_launch()
        return self

    def _start_gateway(self) -> None:
        urls = [w.base_url for w in self.workers]
        self.prom_port = free_port(self.profile.host)
        gw_profile = ServerProfile(
            name=f"{self.profile.name}/router",
            launch="command",
            command=tuple(router_argv(self.profile, urls, "{port}", self.prom_port)),
            host=self.profile.host,
            engine="generic",
            env=self.profile.env,  # the profile's environment reaches every member, the gateway too
            health_path="/health",
            ready_timeout_s=60.0,
        )
        self.gateway = ServerProcess(
            gw_profile,
            self.server_dir / ROUTER_DIR,
            redactor=self.redactor,
            headers=self.headers,
            stop_grace_s=GATEWAY_STOP_GRACE_S,
        )
        self.gateway.start()
        self._wait_workers(urls, within_s=max(30.0, 5.0 * len(urls)))

    def _wait_workers(self, urls: list[str], within_s: float) -> None:
        """Until the gateway's /workers lists each URL healthy (it probes them on its own schedule)."""
        assert self.gateway is not None
        deadline = time.monotonic() + within_s
        seen: dict[str, bool] = {}
        while time.monotonic() < deadline:
            if not self.gateway.alive():
                raise ServerError(
                    f"server {self.profile.name}: the gateway exited with code {self.gateway.returncode}; "
                    f"log {self.gateway.log_path}: {self.gateway.quoted_tail()}"
                )
            seen = gateway_workers(self.gateway.base_url, self.headers)
            if all(seen.get(u) for u in urls):
                return
            time.sleep(0.2)
        missing = [u for u in urls if not seen.get(u)]
        raise ServerError(
            f"server {self.profile.name}: the gateway did not list {', '.join(missing)} as healthy within "
            f"{within_s:g}s; log {self.gateway.log_path}: {self.gateway.quoted_tail()}"
        )

    def _record_launch(self) -> None:
        """replicas.json: the workers' URLs of every launch (a restart moves them), GPUs, the gateway's line."""
        path = self.server_dir / REPLICAS_FILE
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        launches = list(old.get("launches") or []) if isinstance(old, dict) else []
        launches.append({"started_wall": time.time(), "workers": self.worker_urls()})
        assert self.profile.router is not None
        write_json_atomic(
            path,
            {
                "replicas": len(self.workers),
                "policy": self.profile.router.policy,
                "router_argv": self.redactor.argv(self.gateway.argv()) if self.gateway else [],
                "storage": self.profile.storage,
                "gpus": {
                    worker_name(i): w.profile.env.get("CUDA_VISIBLE_DEVICES")
                    for i, w in enumerate(self.workers)
                },
                "launches": launches,
            },
        )

    def alive(self) -> bool:
        return bool(self.gateway is not None and all(m.alive() for m in self.members))

    def down(self) -> tuple[str, ServerProcess] | None:
        """The first member that is not running: ("worker w1", its process) or ("the gateway", ...)."""
        for i, w in enumerate(self.workers):
            if not w.alive():
                return f"worker {worker_name(i)}", w
        if self.gateway is not None and not self.gateway.alive():
            return "the gateway", self.gateway
        return None

    @property
    def returncode(self) -> int | None:
        d = self.down()
        return d[1].returncode if d else None

    def death(self, tail: bool = True) -> str:
        """Which member exited and how, for the failed point's message."""
        d = self.down()
        if d is None:
            return "every worker and the gateway are running"
        what, proc = d
        said = f"{what} of {self.profile.name} exited with code {proc.returncode}"
        return f"{said} during the point" + (f"; log tail: {proc.quoted_tail()}" if tail else "")

    def quoted_tail(self, n: int = 8) -> str:
        d = self.down()
        return (
            d[1].quoted_tail(n) if d else (self.gateway.quoted_tail(n) if self.gateway else "(not started)")
        )

    @property
    def fresh(self) -> bool:
        return self.launches > 0 and self.points_run == 0

    @property
    def settle_s(self) -> float:
        return max(w.settle_s for w in self.workers)

    @property
    def reset_paths(self) -> tuple[str, ...]:
        return self.workers[0].reset_paths

    def stop(self) -> None:
        """The gateway first (no new requests reach a stopping worker), then the workers at once (an SGLang
        worker's shutdown takes seconds)."""
        if self.gateway is not None:
            self.gateway.stop()
        with ThreadPoolExecutor(max(1, len(self.workers)), thread_name_prefix="stop-worker") as pool:
            list(pool.map(ServerProcess.stop, self.workers))

    def restart(self) -> ReplicaGroup:
        self.stop()
        return self.start()

    def __enter__(self) -> ReplicaGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- per point
    def flush(self, headers: dict[str, str]) -> tuple[bool | None, str | None]:
        """SGLang's workers through the gateway (its /flush_cache reaches all); others one by one."""
        if self.workers[0].adapter.gateway_flush:
            return flush_cache(self.base_url, headers=headers, paths=self.reset_paths)
        results = [
            flush_cache(w.base_url, headers=headers, paths=w.reset_paths or RESET_PATHS) for w in self.workers
        ]
        oks = [r[0] for r in results]
        notes = [f"{worker_name(i)}: {r[1]}" for i, r in enumerate(results) if r[1]]
        ok = None if all(o is None for o in oks) else all(o is not False for o in oks)
        return ok, "; ".join(notes) or None

    def scrape(self, pdir: Path, when: str, headers: dict[str, str]) -> None:
        """Each worker's /metrics into <point>/workers/w<i>/, the gateway's into router-metrics-*.prom."""
        name = METRICS_BEFORE if when == "before" else METRICS_AFTER
        for i, w in enumerate(self.workers):
            d = pdir / WORKERS_DIR / worker_name(i)
            d.mkdir(parents=True, exist_ok=True)
            fetch_metrics(w.base_url, d / name, headers)
        if self.prom_port is not None:
            fetch_metrics(
                f"http://{self.profile.host}:{self.prom_port}", pdir / ROUTER_METRICS[when], headers
            )


def gateway_workers(base_url: str, headers: dict[str, str] | None = None) -> dict[str, bool]:
    """The gateway's workers: URL -> healthy, from smg's GET /workers ({} when it does not answer)."""
    req = urllib.request.Request(base_url + "/workers", headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=2.0) as resp:
            body = json.loads(resp.read().decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        return {}
    items = body.get("workers") if isinstance(body, dict) else None
    out: dict[str, bool] = {}
    for w in items or []:
        if isinstance(w, dict) and isinstance(w.get("url"), str):
            out[w["url"].rstrip("/")] = bool(w.get("is_healthy", w.get("healthy")))
    return out
