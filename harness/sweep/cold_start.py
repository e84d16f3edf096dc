"""Cold points on servers with an L3 storage backend, and the line a flush that killed a server printed.

SGLang 0.5.23's `/flush_cache` does not empty L3 (the pages stay in the backend, so a flushed server still
hits them), and with a storage backend on CPU it has killed the server (`RuntimeError: Failed to stop
HiCache storage threads cleanly`, managers/cache_controller.py). So a launched server whose arguments name
`--hicache-storage-backend` gets no flush: each point runs on a fresh server whose
SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR is a new, empty directory (the previous one is removed), and the
point says so (`flush_note`). A point whose flush killed its server is failed with the server's own line.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import weakref
from pathlib import Path

from harness.capture.records import STORAGE_COLD_NOTE, PointRecord
from harness.servers.server import LogMark, Server

STORAGE_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
COLD_NOTE = STORAGE_COLD_NOTE


def _has_l3(server: Server) -> bool:
    return bool(server.storage_envs())


def _new_dirs(server: Server) -> None:
    """New, empty storage directories for the server's next launch: one per worker, or one shared."""
    for env, name in server.storage_envs():
        _swap_dir(env, name)


# server -> the launch that started on new, empty directories: its first point needs no restart
_NEW_DIRS_AT: weakref.WeakKeyDictionary[Server, int] = weakref.WeakKeyDictionary()


def prepare_cold_storage(server: Server) -> None:
    """Before a server's first launch: L3 on new, empty directories, so its first point is cold as launched
    (a restart there would load the model twice: minutes for SGLang replicas on a CPU)."""
    if _has_l3(server):
        _new_dirs(server)
        _NEW_DIRS_AT[server] = server.launches + 1


def cold_storage_point(server: Server) -> str | None:
    """Before a point on a launched server with L3: restart it on a new, empty storage directory; returns
    the note the point records (None: not such a server, flush as usual). Replicas get one directory each,
    or with `storage: shared` one for all of them. A server that has run nothing since it was launched on
    new directories is already that."""
    if not _has_l3(server):
        return None
    if server.fresh and _NEW_DIRS_AT.get(server) == server.launches:
        return COLD_NOTE
    _new_dirs(server)
    server.restart()
    _NEW_DIRS_AT[server] = server.launches
    return COLD_NOTE


def _swap_dir(env: dict[str, str], name: str) -> None:
    """A new, empty storage directory in `env`, the previous one removed."""
    old = env.get(STORAGE_DIR_ENV)
    safe = name.replace("/", "-")
    new = tempfile.mkdtemp(prefix=f"harness-l3-{safe}-")  # outside the capture: not a point
    atexit.register(shutil.rmtree, new, True)
    env[STORAGE_DIR_ENV] = new
    if old and Path(old).name.startswith("harness-l3-"):
        shutil.rmtree(old, ignore_errors=True)


def flush_killed(server: Server, rec: PointRecord, mark: LogMark) -> str | None:
    """When the point's flush failed and the server is gone: the failure, quoting the server's own line."""
    if server.alive() or rec.flushed is not False:
        return None
    said = server.exit_cause(mark)
    if said is None:
        return None
    return f"the cache flush killed the server (exit {server.returncode}): {said}"
