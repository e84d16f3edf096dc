"""SGLang 0.5.23's own server on this CPU, for the tests that hold every SGLang-facing part of the harness to it.

The venv (pinned by harness/servers/sglang_cpu/requirements.lock) and the tiny model are built once into
$HARNESS_CACHE (~3 min cold); each test module starts one server (40-65 s on 2 cores) through the harness's
own launch path (`launch: sglang` resolved for `--server-kind sglang-cpu`) and stops it by its pid.
Skips, with the reason, only when the venv cannot be obtained (no package index); any other failure fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.announce import setup_step
from tests.helpers.sglang_venv import sglang_cpu_env

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class SglangSetup:
    python: Path
    model: Path
    version: str


@pytest.fixture(scope="session")
def sglang_setup() -> SglangSetup:
    from harness.realserver.hf_model import make_hf_model
    from harness.realserver.sglang_suite import SGLANG_SHAPE

    env = sglang_cpu_env("SGLang 0.5.23 CPU venv from its lock file")
    model = make_hf_model(env.python, SGLANG_SHAPE, log=None)
    return SglangSetup(env.python, model.folder, env.sglang_version)


def cpu_profile(name: str, args: list[str], setup: SglangSetup) -> Any:
    """A `launch: sglang` profile as `harness bench --server-kind sglang-cpu` resolves it."""
    from harness.spec.servers import SimSettings, parse_servers
    from harness.sweep.plan import BenchOptions, resolve_profile

    (prof,) = parse_servers([{"name": name, "launch": "sglang", "args": args}], None, "<test>")
    opts = BenchOptions(node="t", server_kind="sglang-cpu", sglang_python=str(setup.python))
    return resolve_profile(prof, opts, SimSettings())


@dataclasses.dataclass
class RunningSglang:
    proc: Any  # harness.servers.process.ServerProcess
    url: str
    log: Path
    args: list[str]

    def generate(self, ids: list[int], max_new_tokens: int = 2, **extra: Any) -> dict[str, Any]:
        body = {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True},
            **extra,
        }
        r = httpx.post(self.url + "/generate", json=body, timeout=120)
        r.raise_for_status()
        return r.json()


def start_sglang(name: str, args: list[str], setup: SglangSetup, folder: Path) -> Iterator[RunningSglang]:
    """One SGLang server for a test module, started and stopped by the harness's ServerProcess."""
    from harness.servers.process import ServerProcess

    prof = cpu_profile(name, args, setup)
    proc = ServerProcess(prof, folder, model=str(setup.model), ready_timeout_s=300)
    with setup_step(f"SGLang {setup.version} on CPU: {name} ({' '.join(args)})"):
        proc.start()
    try:
        yield RunningSglang(proc, proc.base_url, proc.log_path, args)
    finally:
        proc.stop()
