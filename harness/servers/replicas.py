"""N workers and SGLang's gateway (smg) as one server: started, probed, flushed and stopped together.

Each worker is an ordinary ServerProcess (own port, process group, log and server_info under
`workers/w<i>/`); the gateway is one more, launched with `--worker-urls` and a free `--prometheus-port`,
ready once its `/workers` lists every worker healthy. The sweep talks to the gateway's URL; a point reads
each worker's `/metrics` and the gateway's, and names the worker that died when one does.
"""

from __future__ import annotations

import json
import os
import shutil
import time
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
    SERVER_INFO,
    SERVER_LOG,
    WORKERS_DIR,
    write_json_atomic,
)
from harness.capture.manifest import fingerprint
from harness.capture.redact import Redactor
from harness.engines import RESET_PATHS
from harness.servers.control import fetch_metrics, flush_cache
from harness.servers.process import ServerError, ServerProcess, free_port, server_fingerprint
from harness.servers.replica_launch import (
    gateway_workers,
    router_argv,
    smg_display,
    worker_name,
    worker_profile,
)
from harness.servers.server import LogMark
from harness.spec.flags import storage_backend
from harness.spec.servers import ServerProfile

REPLICAS_FILE = REPLICAS  # in the server folder: workers, their URLs per launch, the gateway's line
ROUTER_DIR = "router"
# smg keeps listening 5 s after SIGTERM for a load balancer in front (drain_settle_secs; `smg launch` has no
# flag for it): the harness's gateway has none and nothing in flight when stopped, so 1 s, then SIGKILL
GATEWAY_STOP_GRACE_S = 1.0
ROUTER_METRICS = {"before": ROUTER_METRICS_BEFORE, "after": ROUTER_METRICS_AFTER}


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
        self.taken_from: str | None = None  # the group whose running workers this launch kept

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
            router_argv(self.profile, urls, "{port}", "{prometheus_port}", smg_display())
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
        self._launched(taken_from=None)
        return self

    def _launched(self, taken_from: str | None) -> None:
        """A launch is up: its count, a fresh point count, whose workers it kept, replicas.json."""
        self.launches += 1
        self.points_run = 0
        self.taken_from = taken_from
        self.info = self.workers[0].info
        self._record_launch()

    # ---------------------------------------------------------------- workers kept across router policies
    def take_workers(self, prev: object) -> bool:
        """Start on `prev`'s running workers when they are launched exactly as this group's would be (the
        same line, count, GPUs and environment; no L3, whose points each need a fresh server): only the
        gateway is new, so a sweep over router policies loads the model once. Each worker's log becomes
        this group's too (a hard link: one file, startup lines included), its server_info a copy. False,
        with nothing changed, when `prev` is no such group or a link cannot be made."""
        if not self._same_workers(prev):
            return False
        assert isinstance(prev, ReplicaGroup)
        dirs = [w.server_dir for w in self.workers]  # workers/w<i>/ of this group's folder
        if any((d / SERVER_LOG).exists() for d in dirs):  # a resumed capture: this group's own logs stay
            return False
        made: list[Path] = []
        try:
            for d, w in zip(dirs, prev.workers, strict=True):
                d.mkdir(parents=True, exist_ok=True)
                os.link(w.log_path, d / SERVER_LOG)
                made.append(d / SERVER_LOG)
                if (w.server_dir / SERVER_INFO).exists():
                    shutil.copyfile(w.server_dir / SERVER_INFO, d / SERVER_INFO)
        except OSError:  # no hard links on this file system: launch as usual
            for f in made:
                f.unlink(missing_ok=True)
            return False
        kept = prev.release_workers()
        for d, mine, w in zip(dirs, self.workers, kept, strict=True):
            w.profile, w.server_dir, w.log_path = mine.profile, d, d / SERVER_LOG
        self.workers = kept
        try:
            self._start_gateway()
        except BaseException:
            self.stop()
            raise
        self._launched(taken_from=prev.name)
        return True

    def can_take_workers(self, prev: object) -> bool:
        """Whether `prev`'s workers are launched as this group's: the same line, count, GPUs and environment,
        and no L3 on either (the dry run says so; take_workers also needs them running)."""
        if not isinstance(prev, ReplicaGroup) or prev is self:
            return False
        if self.storage_envs() or prev.storage_envs() or len(prev.workers) != len(self.workers):
            return False
        return all(
            a.model == b.model
            and a.profile.env == b.profile.env
            and server_fingerprint(a) == server_fingerprint(b)
            for a, b in zip(prev.workers, self.workers, strict=True)
        )

    def _same_workers(self, prev: object) -> bool:
        return (
            self.can_take_workers(prev)
            and isinstance(prev, ReplicaGroup)
            and prev.gateway is not None
            and all(w.alive() for w in prev.workers)
        )

    def release_workers(self) -> list[ServerProcess]:
        """Stop the gateway alone and hand the running workers on: this group holds none after."""
        if self.gateway is not None:
            self.gateway.stop()
        self.gateway, self.prom_port = None, None
        kept, self.workers = self.workers, []
        return kept

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
        launches.append(
            {"started_wall": time.time(), "workers": self.worker_urls()}
            | ({"workers_from": self.taken_from} if self.taken_from else {})
        )
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
        """Kept workers ran another group's points: flushed, not fresh."""
        return self.launches > 0 and self.points_run == 0 and self.taken_from is None

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
        """Each worker's own reset, retried while it refuses. Not through smg's /flush_cache: when one worker
        refuses (SGLang while the generation its /health runs for smg's checks), smg answers 206 and a
        retry flushes the others again, so one point left two flush lines in a worker's log, and its log
        slice, which starts at the point's flush line, came out empty (docs/smg-routing.md)."""
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
