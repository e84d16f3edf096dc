"""A server someone else started (`harness run`), as the sweep's Server: always taken to be up, never
restarted, its log not ours; its cache reset tries every engine's endpoint (harness.engines)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.capture import METRICS_AFTER, METRICS_BEFORE, SERVER_INFO, write_json_atomic
from harness.capture.manifest import fingerprint
from harness.capture.redact import Redactor
from harness.engines import ATTACHED_INFO_PATHS, RESET_PATHS
from harness.servers.control import fetch_metrics, fetch_server_info, flush_cache
from harness.servers.process import ServerError
from harness.servers.server import LogMark


@dataclass(eq=False)
class Attached:
    """A URL the harness did not launch (harness.servers.server.Server)."""

    base_url: str
    name: str = "attached"
    server_dir: Path | None = None  # where start() saves its info (server_info.json)
    headers: dict[str, str] = field(default_factory=dict)
    redactor: Redactor = field(default_factory=Redactor)
    returncode: int | None = None
    points_run: int = 0
    launches: int = 0
    info: dict[str, Any] | None = None

    attached = True
    fresh = False  # someone else's server: what it holds is not known
    settle_s = 0.0
    pid = None

    def start(self) -> Attached:
        """Its cache settings, saved as a launched server's are, so its points get predicted vs measured;
        a server without an info endpoint simply has none."""
        info = fetch_server_info(self.base_url, ATTACHED_INFO_PATHS, self.headers)
        self.info = self.redactor.obj(info) if info is not None else None
        if self.info is not None and self.server_dir is not None:
            self.server_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.server_dir / SERVER_INFO, self.info)
        return self

    def stop(self) -> None:
        return None

    def alive(self) -> bool:
        return True

    def __enter__(self) -> Attached:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        return None

    def restart(self) -> Attached:
        raise ServerError(f"{self.base_url}: an attached server is not restarted by the harness")

    def death(self, tail: bool = True) -> str:
        return f"server exited with code {self.returncode}" + (
            f"; log tail: {self.quoted_tail()}" if tail else ""
        )

    def quoted_tail(self, n: int = 8) -> str:
        return "(the attached server's log is not ours)"

    def flush(self, headers: dict[str, str]) -> tuple[bool | None, str | None]:
        return flush_cache(self.base_url, headers=headers, paths=RESET_PATHS)

    def scrape(self, pdir: Path, when: str, headers: dict[str, str]) -> None:
        fetch_metrics(self.base_url, pdir / (METRICS_BEFORE if when == "before" else METRICS_AFTER), headers)

    def worker_urls(self) -> dict[str, str] | None:
        return None

    def metrics_sources(self) -> dict[str, str]:
        return {"server": self.base_url}

    @property
    def own_pid(self) -> int | None:
        return None  # not ours

    def log_mark(self) -> LogMark:
        return ()

    def log_lines_since(self, mark: LogMark, needle: str) -> list[str]:
        return []

    def exit_cause(self, mark: LogMark) -> str | None:
        return None

    def display_argv(self, port: int | str | None = None) -> list[str]:
        return []

    def fingerprint(self) -> str:
        return fingerprint({"attach": self.base_url})

    def manifest_fields(self) -> dict[str, Any]:
        return {}

    def describe(self, quote: Callable[[str], str]) -> list[str]:
        return [f"  server {self.name} [attach]: attach {self.base_url}"]

    def storage_envs(self) -> list[tuple[dict[str, str], str]]:
        return []

    def take_workers(self, prev: object) -> bool:
        return False

    def can_take_workers(self, prev: object) -> bool:
        return False
