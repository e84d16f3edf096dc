"""The server under test as the sweep sees it: one protocol, whatever stands behind the URL.

A single launched process (harness.servers.process), N workers behind SGLang's gateway
(harness.servers.replicas) and a URL someone else started (harness.servers.attached) each implement
it; the sweep (harness.sweep) and advise's confirm run through it and never ask which one they hold.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

# Where a point begins in the server's log(s): one offset per log file the server writes (none attached).
LogMark = tuple[int, ...]


class Server(Protocol):
    """What a sweep needs of a server: its URL and life, the point's cache reset, counters and log slice."""

    points_run: (
        int  # points run on the current launch: the first one on a launched server finds nothing cached
    )
    launches: int
    info: dict[str, Any] | None  # the server's own settings (server_info.json) once started

    @property
    def name(self) -> str: ...
    @property
    def base_url(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def attached(self) -> bool:
        """Someone else's server: never restarted, its log is not ours."""
        ...

    @property
    def fresh(self) -> bool:
        """Launched and nothing run on it yet: its cache is empty without a reset."""
        ...

    @property
    def settle_s(self) -> float:
        """How long a point waits after its load for the server's periodic stats line (adapter.settle_s)."""
        ...

    @property
    def returncode(self) -> int | None: ...

    # ------------------------------------------------------------ life
    def start(self) -> Server: ...
    def stop(self) -> None: ...
    def restart(self) -> Server: ...
    def alive(self) -> bool: ...
    def __enter__(self) -> Server: ...
    def __exit__(self, *exc: object) -> None: ...
    def death(self, tail: bool = True) -> str:
        """Why the server is down, for a failed point's message (a group names the member)."""
        ...

    def quoted_tail(self, n: int = 8) -> str: ...

    # ------------------------------------------------------------ per point
    def flush(self, headers: dict[str, str]) -> tuple[bool | None, str | None]:
        """Empty the prefix cache: (True, note) done, (False, why) refused, (None, why) no endpoint."""
        ...

    def scrape(self, pdir: Path, when: str, headers: dict[str, str]) -> None:
        """Save the server's counters (`when`: before | after) into the point's folder."""
        ...

    def worker_urls(self) -> dict[str, str] | None:
        """Worker name -> URL behind a gateway (the point records them); None for one server."""
        ...

    def metrics_sources(self) -> dict[str, str]:
        """Name -> base URL of every /metrics the point's timeline scrapes (a group: each worker and the
        gateway)."""
        ...

    @property
    def own_pid(self) -> int | None:
        """The engine's process when it is one process of ours (a stall dumps its threads); else None."""
        ...

    def log_mark(self) -> LogMark: ...
    def log_lines_since(self, mark: LogMark, needle: str) -> list[str]:
        """Lines written since `mark` that contain `needle` (a group's prefixed with the worker)."""
        ...

    def exit_cause(self, mark: LogMark) -> str | None:
        """The line the server printed as it exited since `mark`, when its own log says (else None)."""
        ...

    # ------------------------------------------------------------ identity and a fresh launch
    def display_argv(self, port: int | str | None = None) -> list[str]: ...
    def fingerprint(self) -> str:
        """How the server is launched, as a capture folder is checked against."""
        ...

    def manifest_fields(self) -> dict[str, Any]:
        """What the manifest adds for this server besides its launch line (a group's count and policy)."""
        ...

    def describe(self, quote: Callable[[str], str]) -> list[str]:
        """The dry run's lines for this server (`quote` quotes one argument)."""
        ...

    def take_workers(self, prev: Server) -> bool:
        """Start on `prev`'s running engines where they are launched as this server's would be (a replica
        group differing only in its router: only the gateway is new); False, nothing changed, otherwise."""
        ...

    def can_take_workers(self, prev: Server) -> bool:
        """Whether take_workers would keep `prev`'s engines were they running (the dry run's line)."""
        ...

    def storage_envs(self) -> list[tuple[dict[str, str], str]]:
        """What a fresh launch on an empty L3 storage needs: the environments (and a name for each) whose
        storage directory is renewed; [] when the server has no storage backend or is not ours."""
        ...
