"""The oracle drives SGLang 0.5.23's own radix cache in the one pinned SGLang venv the harness builds.

That venv (harness/servers/sglang_cpu/venv.py, from harness/servers/sglang_cpu/requirements.lock) also runs
SGLang's server for `make bench-sglang` and tests/real_sglang/, so CI installs SGLang once, not twice. Run
as a script to build it ahead of time: `python tests/oracle/oracle_env.py` (idempotent); with `--if-built`
it only prints the venv's python when it is there (exit 1 otherwise). The main venv never imports torch:
tests talk to SGLang's tree through `driver.py` over stdin/stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.servers.sglang_cpu.venv import SGLANG_VERSION, SglangEnvError, cached_env, ensure_sglang

__all__ = ["SGLANG_VERSION", "OracleUnavailable", "ensure_oracle_python", "is_built", "python_path"]


class OracleUnavailable(RuntimeError):
    """SGLang's tree cannot be installed here (no package index); tests skip with this reason."""


def is_built() -> bool:
    return cached_env() is not None


def python_path() -> Path | None:
    found = cached_env()
    return found.python if found is not None else None


def ensure_oracle_python() -> Path:
    """The SGLang venv's python, building it once (~3 min, ~2.7 GB) under its file lock."""
    try:
        return ensure_sglang(log=None).python
    except SglangEnvError as e:
        if e.unobtainable:
            raise OracleUnavailable(str(e)) from None
        raise


if __name__ == "__main__":
    if sys.argv[1:] == ["--if-built"]:
        print(python_path() or "")
        raise SystemExit(0 if is_built() else 1)
    try:
        print(ensure_oracle_python())
    except OracleUnavailable as e:
        print(f"oracle unavailable: {e}", file=sys.stderr)
        raise SystemExit(1) from None
