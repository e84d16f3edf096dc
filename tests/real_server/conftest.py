"""Builds (once, cached by version) llama.cpp's llama-server and the tiny model for the real_server group.

The first run pays the build (~7 min on 2 cores); later runs reuse ~/.cache/harness (or $HARNESS_CACHE).
Skips, with the reason, only when the prerequisites cannot be obtained (no network; no compiler and no
root). Any other failure of the preparation is a test failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.paths import cache_root
from tests.helpers.announce import announce, setup_step

BUILD_TIMEOUT_S = 2400  # a cold build on 2 busy cores, plus the run


@dataclass
class Llama:
    binary: Path
    gguf: Path
    tokenizer: Path
    build_seconds: float | None
    reused: bool


def _log(msg: str) -> None:
    announce(msg)  # reaches the terminal past pytest's capture: a cold build takes minutes


@pytest.fixture(scope="session")
def llama() -> Llama:
    from harness.realserver.model import make_model
    from harness.realserver.prepare import PrepareError, can_prepare, prepare_server

    ok, why = can_prepare()
    if not ok:
        pytest.skip(f"llama-server cannot be built here: {why}")
    try:
        with setup_step(f"llama-server (built once into {cache_root()}, ~7 min cold on 2 cores)"):
            server = prepare_server(log=_log)
    except PrepareError as e:
        if e.unobtainable:
            pytest.skip(f"llama-server cannot be built here: {e}")
        raise
    with setup_step("tiny GGUF model for llama-server"):
        model = make_model(log=_log)
    return Llama(server.binary, model.gguf, model.tokenizer, server.build_seconds, server.reused)
