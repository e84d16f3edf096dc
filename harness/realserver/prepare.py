"""Build llama.cpp's `llama-server` reproducibly from the pinned llama-cpp-python sdist, cached by version.

Steps: download the sdist, check/install the toolchain, unpack, configure, build the one target.
Each step is timed and a failing one raises PrepareError naming the step and why (exit 2).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import PrepareError
from harness.paths import cache_root
from harness.realserver import LLAMA_CPP_VERSION

PACKAGE = "llama-cpp-python"
# The flags of docs/real-servers.md: no tests/examples, no UI (a prebuilt UI would be downloaded), no OpenSSL.
CMAKE_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
TARGET = "llama-server"
# command -> Debian package that provides it
TOOLS: dict[str, str] = {"cmake": "cmake", "ninja": "ninja-build", "g++": "g++"}
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
_OFFLINE_RE = re.compile(
    r"NewConnectionError|Temporary failure in name resolution|Network is unreachable|"
    r"Failed to establish a new connection|ConnectTimeout|No route to host|ProxyError|"
    r"Connection refused|Max retries exceeded",
    re.I,
)


@dataclass
class Step:
    name: str
    seconds: float
    detail: str


@dataclass
class Prepared:
    """Where the built server lives and what preparing it cost this time."""

    version: str
    cache_dir: Path
    binary: Path
    reused: bool
    steps: list[Step] = field(default_factory=list)
    build_seconds: float | None = None  # of the build that produced the cached binary


def cache_dir(version: str = LLAMA_CPP_VERSION) -> Path:
    return cache_root() / f"llama-cpp-{version}"


def binary_path(version: str = LLAMA_CPP_VERSION) -> Path:
    return cache_dir(version) / "build" / "bin" / TARGET


def _marker(version: str) -> Path:
    return cache_dir(version) / "built.json"


def cached_binary(version: str = LLAMA_CPP_VERSION) -> Path | None:
    """The binary of an earlier successful build with the same flags, or None."""
    marker, binary = _marker(version), binary_path(version)
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if info.get("flags") != list(CMAKE_FLAGS) or not os.access(binary, os.X_OK):
        return None
    return binary


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def can_prepare() -> tuple[bool, str]:
    """Whether a build is possible here (tools present or installable); the reason when not."""
    if cached_binary() is not None:
        return True, "cached"
    missing = missing_tools()
    if missing and not (os.geteuid() == 0 and shutil.which("apt-get")):
        pkgs = " ".join(TOOLS[t] for t in missing)
        return (
            False,
            f"missing {', '.join(missing)} and cannot install them (not root or no apt-get): apt-get install {pkgs}",
        )
    return True, "buildable"


def _run(step: str, cmd: list[str], log: Path | None = None, cwd: Path | None = None) -> str:
    """Run one command of a step; its output goes to `log` (or is returned); failure -> PrepareError."""
    try:
        if log is not None:
            with log.open("ab") as fh:
                fh.write(("$ " + " ".join(cmd) + "\n").encode())
                fh.flush()
                rc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
            out = ""
        else:
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
            rc, out = proc.returncode, (proc.stdout or "") + (proc.stderr or "")
    except OSError as e:
        raise PrepareError(step, f"cannot run {cmd[0]}: {e}") from e
    if rc != 0:
        if log is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-15:]
            why = f"`{' '.join(cmd[:3])} ...` exited {rc}; log {log}:\n" + "\n".join(tail)
        else:
            lines = [ln for ln in out.strip().splitlines() if ln.strip()]
            why = f"`{' '.join(cmd[:4])} ...` exited {rc}: " + (lines[-1] if lines else "no output")
        raise PrepareError(step, why, out)
    return out


def _step_download(version: str, root: Path) -> str:
    sdist_dir = root / "sdist"
    found = sorted(sdist_dir.glob(f"llama_cpp_python-{version}.tar.gz")) if sdist_dir.is_dir() else []
    if found:
        return f"reused {found[0]}"
    sdist_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    cmd += ["--disable-pip-version-check", "-d", str(sdist_dir), f"{PACKAGE}=={version}"]
    try:
        _run("download", cmd)
    except PrepareError as e:
        shutil.rmtree(sdist_dir, ignore_errors=True)
        offline = bool(_OFFLINE_RE.search(e.output)) or "(from versions: none)" in e.output
        raise PrepareError("download", _download_why(e.why, e.output, version), unobtainable=offline) from e
    found = sorted(sdist_dir.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise PrepareError("download", f"pip reported success but no sdist lies in {sdist_dir}")
    return f"downloaded {found[0].name}"


def _download_why(why: str, output: str, version: str) -> str:
    """pip's last line says little offline; name the likely cause first."""
    if _OFFLINE_RE.search(output) or "(from versions: none)" in output:
        return f"cannot reach the package index to fetch {PACKAGE}=={version} (offline, or no index configured); pip said: {why}"
    if "No matching distribution" in output or "Could not find a version" in output:
        return f"{PACKAGE}=={version} is not on the package index (sdist versions only)"
    return why


def _step_tools(root: Path) -> str:
    missing = missing_tools()
    if not missing:
        return "cmake, ninja, g++ present"
    pkgs = [TOOLS[t] for t in missing]
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PrepareError(
            "tools",
            f"missing {', '.join(missing)}; install them as root: apt-get install -y {' '.join(pkgs)}",
            unobtainable=True,
        )
    log = root / "apt.log"
    env_cmd = ["env", "DEBIAN_FRONTEND=noninteractive"]
    try:
        _run("tools", [*env_cmd, "apt-get", "update", "-q"], log=log)
        _run("tools", [*env_cmd, "apt-get", "install", "-y", "-q", "--no-install-recommends", *pkgs], log=log)
    except PrepareError as e:  # no network or no package source: a prerequisite we cannot obtain
        raise PrepareError(
            "tools", f"cannot install {' '.join(pkgs)}: {e.why}", e.output, unobtainable=True
        ) from e
    still = missing_tools()
    if still:
        raise PrepareError(
            "tools", f"apt-get installed {' '.join(pkgs)} but {', '.join(still)} still not on PATH"
        )
    return f"installed {' '.join(pkgs)}"


def _step_unpack(version: str, root: Path) -> str:
    src = root / "src"
    vendor = src / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if (vendor / "CMakeLists.txt").is_file():
        return f"reused {vendor}"
    sdist = root / "sdist" / f"llama_cpp_python-{version}.tar.gz"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    try:
        with tarfile.open(sdist) as tf:
            tf.extractall(src, filter="data")
    except (OSError, tarfile.TarError) as e:
        raise PrepareError("unpack", f"{sdist}: {e}") from e
    if not (vendor / "CMakeLists.txt").is_file():
        raise PrepareError("unpack", f"{sdist} holds no vendor/llama.cpp/CMakeLists.txt")
    return f"unpacked to {src}"


def _step_configure(version: str, root: Path) -> str:
    vendor = root / "src" / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    build = root / "build"
    cmd = ["cmake", "-S", str(vendor), "-B", str(build), "-G", "Ninja", *CMAKE_FLAGS]
    _run("configure", cmd, log=root / "build.log")
    return " ".join(CMAKE_FLAGS)


def _step_build(version: str, root: Path, jobs: int | None) -> str:
    jobs = jobs or os.cpu_count() or 2
    cmd = ["cmake", "--build", str(root / "build"), "--target", TARGET, "-j", str(jobs)]
    _run("build", cmd, log=root / "build.log")
    if not os.access(binary_path(version), os.X_OK):
        raise PrepareError("build", f"the build finished but {binary_path(version)} is missing")
    return f"{binary_path(version)} (-j {jobs})"


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """One preparer per cache folder: a second waits, then finds the binary built."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def prepare_server(
    version: str = LLAMA_CPP_VERSION,
    log: Callable[[str], None] | None = print,
    jobs: int | None = None,
) -> Prepared:
    """The llama-server binary for `version`: the cached one, or a fresh build (minutes) cached for next time."""
    say = log or (lambda _m: None)
    if not _VERSION_RE.match(version):
        raise PrepareError("version", f"{version!r} is not a release number like {LLAMA_CPP_VERSION}")
    root = cache_dir(version)
    steps: list[Step] = []

    def timed(name: str, fn: Callable[[], str]) -> None:
        say(f"[prepare] {name} ...")
        t0 = time.monotonic()
        detail = fn()
        step = Step(name, time.monotonic() - t0, detail)
        steps.append(step)
        say(f"[prepare] {name}: {detail} ({step.seconds:.1f} s)")

    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PrepareError("cache", f"cannot create {root}: {e}") from e
    try:
        return _prepare_locked(version, root, steps, timed, say, jobs)
    except PrepareError:
        if {p.name for p in root.iterdir()} <= {".lock"}:  # nothing but our lock: leave no trace
            shutil.rmtree(root, ignore_errors=True)
        raise


def _prepare_locked(
    version: str,
    root: Path,
    steps: list[Step],
    timed: Callable[[str, Callable[[], str]], None],
    say: Callable[[str], None],
    jobs: int | None,
) -> Prepared:
    with locked(root):
        binary = cached_binary(version)
        if binary is not None:
            info = json.loads(_marker(version).read_text())
            say(
                f"[prepare] reuse: {binary} (built in {info.get('build_seconds', 0):.0f} s on {info.get('built_at', '?')})"
            )
            return Prepared(version, root, binary, True, steps, info.get("build_seconds"))
        timed("download", lambda: _step_download(version, root))
        timed("tools", lambda: _step_tools(root))
        timed("unpack", lambda: _step_unpack(version, root))
        timed("configure", lambda: _step_configure(version, root))
        timed("build", lambda: _step_build(version, root, jobs))
        total = sum(s.seconds for s in steps)
        info = {
            "version": version,
            "flags": list(CMAKE_FLAGS),
            "binary": str(binary_path(version)),
            "build_seconds": round(total, 1),
            "steps": {s.name: round(s.seconds, 1) for s in steps},
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        _marker(version).write_text(json.dumps(info, indent=2) + "\n")
        return Prepared(version, root, binary_path(version), False, steps, total)
