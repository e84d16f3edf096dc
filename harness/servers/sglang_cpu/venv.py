"""Build and cache the venv that runs SGLang 0.5.23's own server on CPU, installed only from a lock file.

Under $HARNESS_CACHE (default ~/.cache/harness)/sglang-cpu-<version>-<lock hash>: CPU torch first (the
wheel on disk; a looser torch pulls a multi-GB CUDA build), then every package of requirements.lock with
--no-deps and torch as a constraint on each step, then sglang itself with --no-deps (its metadata asks for
CUDA torch, flashinfer and sgl-kernel). `built.json` is written only after the server's modules import
with the stand-ins on the path, so an interrupted install is redone, never trusted. A changed lock file is
a new folder. Run `python -m harness.servers.sglang_cpu.venv` to build it ahead of time.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.paths import cache_root
from harness.servers.sglang_cpu import LOCK_FILE
from harness.servers.sglang_cpu.flags import cpu_env

SGLANG_VERSION = "0.5.23"
TORCH_PIN = "torch==2.13.0+cpu"
INSTALL_TIMEOUT_S = 2400
# what the server's processes import at startup (HTTP server, scheduler, detokenizer, HiCache host pool)
CHECK = (
    "import sglang, torch, sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler, "
    "sglang.srt.managers.detokenizer_manager, sglang.srt.mem_cache.pool_host.mha; "
    "print(sglang.__version__, torch.__version__)"
)
Log = Callable[[str], None]


class SglangEnvError(HarnessError):
    """The venv could not be built here; `unobtainable` when the cause is outside the project (no index)."""

    def __init__(self, msg: str, unobtainable: bool = False) -> None:
        super().__init__(msg)
        self.unobtainable = unobtainable


@dataclass(frozen=True)
class SglangEnv:
    """Where the venv is and what building it cost (this time, or when it was built)."""

    root: Path
    python: Path
    reused: bool
    build_seconds: float
    sglang_version: str
    torch_version: str


def lock_hash() -> str:
    return hashlib.sha256(LOCK_FILE.read_bytes() + TORCH_PIN.encode()).hexdigest()[:10]


def venv_dir() -> Path:
    return cache_root() / f"sglang-cpu-{SGLANG_VERSION}-{lock_hash()}"


def python_path() -> Path:
    return venv_dir() / "bin" / "python"


def cached_env() -> SglangEnv | None:
    """The venv of an earlier complete install, or None."""
    try:
        info = json.loads((venv_dir() / "built.json").read_text())
    except (OSError, ValueError):
        return None
    if not os.access(python_path(), os.X_OK):
        return None
    return SglangEnv(
        venv_dir(), python_path(), True, float(info.get("build_seconds", 0)), info["sglang"], info["torch"]
    )


@contextlib.contextmanager
def build_lock(root: Path) -> Iterator[None]:
    """One builder per lock file: a second waits, then finds the folder built (the venv; the bench overlay)."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"{root.name}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _pip(py: Path, args: list[str], log_path: Path) -> None:
    cmd = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    with log_path.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        r = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S, check=False)
    if r.returncode != 0:
        tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-6:]
        text = " | ".join(tail)
        unobtainable = any(
            s in text for s in ("No matching distribution", "NewConnectionError", "Could not find")
        )
        raise SglangEnvError(
            f"sglang-cpu venv: pip install {' '.join(args[-2:])} exited {r.returncode} (log {log_path}): {text}",
            unobtainable,
        )


def ensure_sglang(log: Log | None = print) -> SglangEnv:
    """The cached venv, or a fresh install (~2-4 min, ~2.7 GB) cached for next time."""
    say = log or (lambda _m: None)
    found = cached_env()
    if found is not None:
        say(
            f"[sglang-env] reuse {found.root} (sglang {found.sglang_version}, built in {found.build_seconds:.0f} s)"
        )
        return found
    root = venv_dir()
    with build_lock(root):
        found = cached_env()
        if found is not None:
            return found
        say(
            f"[sglang-env] installing sglang=={SGLANG_VERSION} with {TORCH_PIN} from {LOCK_FILE.name} into {root} (2-4 min) ..."
        )
        t0 = time.monotonic()
        shutil.rmtree(root, ignore_errors=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(root)
        py = root / "bin" / "python"
        log_path = root / "install.log"
        constraint = root / "constraints.txt"
        constraint.write_text(TORCH_PIN + "\n")
        _pip(py, [TORCH_PIN], log_path)
        _pip(py, ["-c", str(constraint), "--no-deps", "-r", str(LOCK_FILE)], log_path)
        _pip(py, ["-c", str(constraint), "--no-deps", f"sglang=={SGLANG_VERSION}"], log_path)
        env = {**os.environ, **cpu_env({})}
        r = subprocess.run(
            [str(py), "-c", CHECK], capture_output=True, text=True, timeout=600, env=env, check=False
        )
        if r.returncode != 0:
            last = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()][-1:]
            raise SglangEnvError(
                f"sglang {SGLANG_VERSION} installed in {root} but its server does not import: {last}"
            )
        sglang_v, torch_v = (r.stdout.split() + ["", ""])[:2]
        seconds = round(time.monotonic() - t0, 1)
        info = {"sglang": sglang_v, "torch": torch_v, "build_seconds": seconds, "lock": lock_hash()}
        (root / "built.json").write_text(json.dumps(info, indent=2) + "\n")
        say(f"[sglang-env] installed sglang {sglang_v} (torch {torch_v}) in {seconds:.0f} s")
        return SglangEnv(root, py, False, seconds, sglang_v, torch_v)


if __name__ == "__main__":
    try:
        print(ensure_sglang().python)
    except SglangEnvError as e:
        print(f"sglang-env: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
