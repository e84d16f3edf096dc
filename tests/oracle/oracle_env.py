"""Build and cache a venv holding SGLang 0.5.23's own radix cache, so tests can diff against real code.

Run as a script to build it ahead of time: `python tests/oracle/oracle_env.py` (idempotent); with
`--if-built` it only prints the venv's python when it is there (exit 1 otherwise), building nothing.
The venv lives under $HARNESS_CACHE (default ~/.cache/harness)/sglang-oracle-0.5.23 and is marked
complete by a stamp file written only after the import check passes, so an interrupted build is
rebuilt rather than trusted. The main venv never imports torch: tests talk to it through
`driver.py` over stdin/stdout.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

SGLANG_VERSION = "0.5.23"
TORCH_PIN = "torch==2.13.0+cpu"
# What `import sglang.srt.mem_cache.radix_cache` needs (docs/real-servers.md); torch comes first, pinned.
DEPS = [
    "numpy",
    "orjson",
    "psutil",
    "pybase64",
    "requests",
    "packaging",
    "pillow",
    "starlette",
    "msgspec",
    "pydantic",
    "pyzmq",
    "tqdm",
    "IPython",
    "aiohttp",
    "transformers",
    "dill",
    "apache-tvm-ffi==0.1.11",
    "sentencepiece",
    "compressed-tensors",
    "gguf",
    "openai==2.8.0",
    "partial_json_parser",
    "triton",
]
HERE = Path(__file__).resolve().parent
CHECK = f"import sys; sys.path.insert(0, {str(HERE)!r}); import driver; driver.load_sglang(); print('ok')"


class OracleUnavailable(RuntimeError):
    """SGLang's tree cannot be installed here (no network, no wheel); tests skip with this reason."""


def cache_root() -> Path:
    return Path(os.environ.get("HARNESS_CACHE") or Path.home() / ".cache" / "harness")


def venv_dir() -> Path:
    return cache_root() / f"sglang-oracle-{SGLANG_VERSION}"


def python_path() -> Path:
    return venv_dir() / "bin" / "python"


def _stamp() -> Path:
    return venv_dir() / ".complete"


def is_built() -> bool:
    return _stamp().exists() and python_path().exists()


def _pip(py: Path, args: list[str], log) -> None:
    cmd = [str(py), "-m", "pip", "install", "-q", *args]
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=1800)
    if r.returncode != 0:
        raise OracleUnavailable(
            f"pip install failed (exit {r.returncode}): {' '.join(args[-3:])}; see {log.name}"
        )


def _check_index() -> None:
    """Fail fast (a skip, not a 3-minute pip timeout per package) when the package index is unreachable."""
    import socket
    from urllib.parse import urlparse

    index = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    host = urlparse(index).hostname or "pypi.org"
    try:
        socket.create_connection((host, 443), timeout=5).close()
    except OSError as e:
        raise OracleUnavailable(
            f"package index {host} unreachable ({e}); no network to install sglang"
        ) from None


def ensure_oracle_python() -> Path:
    """Return the oracle venv's python, building it once (minutes, ~2.5 GB) under a file lock."""
    if is_built():
        return python_path()
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"sglang-oracle-{SGLANG_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built():
            return python_path()
        _check_index()
        target = venv_dir()
        shutil.rmtree(target, ignore_errors=True)
        log_path = root / f"sglang-oracle-{SGLANG_VERSION}.build.log"
        with open(log_path, "w") as log:
            venv.EnvBuilder(with_pip=True, clear=True).create(target)
            py = python_path()
            with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as c:
                c.write(TORCH_PIN + "\n")
                constraint = c.name
            try:
                _pip(py, [TORCH_PIN], log)
                _pip(py, ["-c", constraint, *DEPS], log)
                _pip(py, ["-c", constraint, "--no-deps", f"sglang=={SGLANG_VERSION}"], log)
            finally:
                os.unlink(constraint)
            r = subprocess.run([str(py), "-c", CHECK], capture_output=True, text=True, timeout=600)
            log.write(r.stdout + r.stderr)
            if r.returncode != 0 or "ok" not in r.stdout:
                raise OracleUnavailable(
                    f"sglang {SGLANG_VERSION} installed but does not import; see {log_path}"
                )
        _stamp().write_text(SGLANG_VERSION + "\n")
    return python_path()


if __name__ == "__main__":
    if sys.argv[1:] == ["--if-built"]:
        print(python_path() if is_built() else "")
        raise SystemExit(0 if is_built() else 1)
    try:
        print(ensure_oracle_python())
    except OracleUnavailable as e:
        print(f"oracle unavailable: {e}", file=sys.stderr)
        raise SystemExit(1) from None
