"""One real SGLang 0.5.23 server with an L3 storage backend (file, 1,200-token pool, --hicache-ratio 2, on
CPU): pages written through and reported as SGLang names them, a prefix lost from device and host read back
from storage as the sim says, and a flush that leaves L3 warm.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import httpx
import pytest

from harness.metrics import counter_deltas, parse_prometheus
from tests.helpers.announce import setup_step
from tests.real_sglang.conftest import RunningSglang, cpu_profile

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]
ARGS = [
    "--max-total-tokens",
    "1200",
    "--enable-hierarchical-cache",
    "--hicache-ratio",
    "2",
    "--hicache-storage-backend",
    "file",
    "--hicache-storage-prefetch-policy",
    "wait_complete",
    "--enable-cache-report",
    "--enable-metrics",
]
UNFULFILLED = "sglang:storage_prefetch_unfulfilled_tokens_total"


@pytest.fixture(scope="module")
def l3_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sglang-l3-pages")


@pytest.fixture(scope="module")
def server(sglang_setup, tmp_path_factory, l3_dir):
    from harness.servers.process import ServerProcess

    prof = cpu_profile("l3", ARGS, sglang_setup)
    proc = ServerProcess(
        prof, tmp_path_factory.mktemp("sglang-l3"), model=str(sglang_setup.model), ready_timeout_s=300
    )
    proc.extra_env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = str(l3_dir)
    with setup_step(f"SGLang {sglang_setup.version} on CPU: l3 ({' '.join(ARGS)})"):
        proc.start()
    try:
        yield RunningSglang(proc, proc.base_url, proc.log_path, ARGS)
    finally:
        proc.stop()


def _sequence() -> list[list[int]]:
    """A 600-token prefix, nine 500-token prompts that push it out of device and host, the prefix again."""
    a = [random.Random(1).randrange(10, 1900) for _ in range(600)]
    fillers = [[random.Random(10 + k).randrange(2000, 4800) for _ in range(500)] for k in range(9)]
    return [a, *fillers, [*a, 7]]


def test_a_prefix_lost_from_device_and_host_comes_back_from_storage_as_in_the_sim(
    server: RunningSglang, l3_dir: Path, tmp_path: Path
) -> None:
    from harness.sim.engine import Engine, EngineConfig, SimRequest

    before = parse_prometheus(httpx.get(server.url + "/metrics", timeout=10).text)
    metas = [server.generate(ids)["meta_info"] for ids in _sequence()]
    time.sleep(1)
    after = parse_prometheus(httpx.get(server.url + "/metrics", timeout=10).text)
    assert any(l3_dir.iterdir())  # pages written through to the directory
    last = metas[-1]
    details = last["cached_tokens_details"]
    assert details["storage_backend"] == "HiCacheFile"
    d = counter_deltas(before, after)
    real = {"storage": details.get("storage", 0), "unfulfilled": d.total(UNFULFILLED) or 0}
    # the same requests, one after another, through the sim's engine with the same settings
    cfg = EngineConfig(
        pool_tokens=1200,
        hicache=True,
        hicache_ratio=2.0,
        storage_backend="file",
        storage_dir=str(tmp_path / "sim-l3"),
        storage_prefetch_policy="wait_complete",
        card="tiny-test",
    )
    eng = Engine(cfg)
    done: list[SimRequest] = []
    eng.on_finish = done.append
    t = 0.0
    for i, ids in enumerate(_sequence()):
        eng.add(SimRequest(rid=str(i), input_ids=ids, output_ids=[1, 2], arrival=t))
        while eng.busy():
            b = eng.schedule(t)
            assert b is not None
            t += b.duration
            eng.complete(b, t)
    sim = {"storage": done[-1].cached_storage, "unfulfilled": sum(eng.stats.storage_unfulfilled.values())}
    assert real == sim == {"storage": 600, "unfulfilled": 0}, (real, sim, details)


def test_a_flush_leaves_l3_warm(server: RunningSglang) -> None:
    """Why bench gives L3 servers a fresh server on an empty directory instead of a flush: after /flush_cache
    (device and host emptied) the prefix still comes back from storage. (Before the CPU read path worked,
    this flush killed the server: `RuntimeError: Failed to stop HiCache storage threads cleanly.`; with it,
    the storage threads stop cleanly.)"""
    from harness.servers.control import flush_cache

    flushed, note = flush_cache(server.url, paths=server.proc.reset_paths)
    assert flushed is True and server.proc.alive(), (flushed, note, server.proc.quoted_tail())
    again = server.generate(_sequence()[-1])["meta_info"]
    assert again["cached_tokens_details"]["storage"] == 600, again
