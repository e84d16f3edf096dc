"""The pinned SGLang 0.5.23 CPU venv for a test: built once into the cache (announced, ~3 min), else reused;
a test skips, with the reason, only when it cannot be installed here (no package index)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.announce import announce, setup_step


def sglang_cpu_env(what: str) -> Any:
    """The venv (harness.servers.sglang_cpu.venv's SglangEnv); `what` names it in the setup line."""
    from harness.servers.sglang_cpu.venv import SglangEnvError, cached_env, ensure_sglang

    try:
        if cached_env() is None:
            with setup_step(f"{what} (installed once into the cache, ~3 min)"):
                return ensure_sglang(log=announce)
        return ensure_sglang(log=None)
    except SglangEnvError as e:
        if e.unobtainable:
            pytest.skip(f"{what} cannot be installed here: {e}")
        raise
