"""SGLang's own server on a CPU-only machine: the import-time stand-ins, the pinned venv, the CPU flags.

Only `launch: sglang` under `--server-kind sglang-cpu` uses this: the harness puts this folder on the
SGLang processes' PYTHONPATH (sitecustomize.py loads in every one of them) and adds the flags a CPU run
needs. On a GPU node none of it is used and nothing changes. Facts: docs/real-sglang.md.
"""

from __future__ import annotations

from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent  # holds sitecustomize.py, loaded by every SGLang process
LOCK_FILE = SHIM_DIR / "requirements.lock"
SHIM_MARK = "HARNESS-CPU-SHIM"  # the line a replaced kernel prints when something calls it
