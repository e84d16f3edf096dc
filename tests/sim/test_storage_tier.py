"""The engine's L3 tier (harness.sim.storage_tier): servers sharing a storage directory share prefixes, the
cached split adds up per request and in the counters, and two real sim processes show it in records."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engines.counters import cache_figures
from harness.errors import HarnessError
from harness.metrics import STORAGE_BACKUPED, counter_deltas, parse_prometheus
from harness.sim.engine import Engine, EngineConfig, SimRequest
from harness.sim.introspect import snapshot
from harness.sim.metrics import Histogram, render
from harness.sim.storage import FileStore
from harness.sim.storage_tier import chunk_part
from tests.helpers.procs import SimProc
from tests.helpers.specs import SIM_FAST, TIMEOUTS, shared_prefix, write_spec


def ids(n: int, seed: int) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(1000, 30000) for _ in range(n)]


def config(directory: Path, policy: str = "wait_complete", **kw) -> EngineConfig:
    kw.setdefault("hicache_ratio", 2.0)
    return EngineConfig(
        card="tiny-test",
        hicache=True,
        storage_backend="file",
        storage_dir=str(directory),
        storage_prefetch_policy=policy,
        **kw,
    )


def serve(cfg: EngineConfig, prompts: list[list[int]]) -> tuple[list[SimRequest], Engine]:
    """Requests one after another on one engine; (finished requests, the engine) for its counters."""
    eng = Engine(cfg)
    done: list[SimRequest] = []
    eng.on_finish = done.append
    t = 0.0
    for i, p in enumerate(prompts):
        r = SimRequest(rid=str(i), input_ids=p, output_ids=[1, 2, 3], arrival=t)
        r.received = t
        eng.add(r)
        while eng.busy():
            b = eng.schedule(t)
            assert b is not None
            t += b.duration
            eng.complete(b, t)
    return done, eng


def test_a_second_server_on_the_same_directory_hits_storage(tmp_path: Path):
    a, b = ids(1200, 1), ids(900, 2)
    first, eng1 = serve(config(tmp_path / "l3"), [a, b])
    assert all(r.cached_storage == 0 for r in first)  # nothing stored before it
    assert eng1.stats.storage_written_pages >= 1200 + 900 - 2  # backed up, then written through
    # sglang:backuped_tokens_total: each backup op's own pages; here every one of them was new
    assert eng1.stats.storage_backuped_tokens == eng1.stats.storage_written_pages
    second, eng2 = serve(config(tmp_path / "l3"), [a + ids(50, 3), b])
    assert [r.cached_storage for r in second] == [
        1200,
        899,
    ]  # a whole (with its answer) and b but its last token
    assert eng2.stats.cached_storage == 1200 + 899 and eng2.stats.prefetched_tokens == 1200 + 899
    empty, eng3 = serve(config(tmp_path / "empty"), [a, b])
    assert [r.cached_storage for r in empty] == [0, 0] and eng3.stats.storage_hit_tokens == 0


def test_the_tier_split_adds_up_per_request_and_in_the_counters(tmp_path: Path):
    shared = ids(600, 7)
    serve(config(tmp_path / "l3", pool_tokens=3000), [shared + ids(40, 8)])
    prompts = [shared + ids(40, 10 + i) for i in range(3)] + [ids(2000, 20 + i) for i in range(3)]
    prompts += [shared + ids(40, 30)]  # back after the pool churned: device, host or storage
    done, eng = serve(config(tmp_path / "l3", pool_tokens=3000), prompts)
    for r in done:
        assert r.cached_device + r.cached_host + r.cached_storage == r.cached_tokens
    assert done[0].cached_storage == 600  # the first one found the shared prefix only in storage
    assert (
        sum(r.cached_tokens for r in done)
        == eng.stats.cached_device + eng.stats.cached_host + eng.stats.cached_storage
    )
    text = render(snapshot(eng, eng.config), Histogram((1.0,)), Histogram((1.0,)), "m")
    scrape = parse_prometheus(text)
    zero = parse_prometheus(
        render(snapshot(Engine(eng.config), eng.config), Histogram((1.0,)), Histogram((1.0,)), "m")
    )
    cf = cache_figures(counter_deltas(zero, scrape))
    assert cf["cached_tokens"] == sum(r.cached_tokens for r in done)
    assert sum(cf["cached_by_source"].values()) == cf["cached_tokens"]
    assert cf["cached_by_source"]["storage"] == sum(r.cached_storage for r in done)
    assert 'sglang:storage_prefetch_unfulfilled_tokens_total{engine_type="unified"' in text
    assert 'mode="storage_hit"' in text and "sglang:prefetched_tokens_total" in text
    written = counter_deltas(zero, scrape).total(STORAGE_BACKUPED)
    assert written == eng.stats.storage_backuped_tokens and written >= 3 * 2000  # the churn was written


def test_best_effort_admitted_at_once_takes_nothing(tmp_path: Path):
    a = ids(1200, 1)
    serve(config(tmp_path / "l3"), [a])
    (r,), eng = serve(config(tmp_path / "l3", policy="best_effort"), [a])
    assert r.cached_storage == 0
    assert eng.stats.storage_unfulfilled == {"storage_transfer": 1199}


def test_bad_storage_settings_are_one_line_errors(tmp_path: Path):
    with pytest.raises(HarnessError, match="--hicache-storage-backend: invalid choice 'tape'"):
        Engine(
            EngineConfig(card="tiny-test", hicache=True, storage_backend="tape", storage_dir=str(tmp_path))
        )
    with pytest.raises(HarnessError, match="needs --enable-hierarchical-cache"):
        Engine(EngineConfig(card="tiny-test", storage_backend="file", storage_dir=str(tmp_path)))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(HarnessError, match="SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR: cannot use"):
        Engine(config(blocker / "sub"))


def test_chunk_part_keeps_whole_pages():
    from harness.sim.sched_records import PrefillBudget

    assert chunk_part(100, PrefillBudget(chunk=500, input=500, offset=0), 16) == 100
    assert chunk_part(100, PrefillBudget(chunk=50, input=500, offset=0), 16) == 48


SIM_L3 = [
    *SIM_FAST,
    "--enable-hierarchical-cache",
    "--hicache-storage-backend",
    "file",
    "--hicache-storage-prefetch-policy",
    "wait_complete",
    "--enable-cache-report",
    "--enable-metrics",
]


def _run_point(tmp_path: Path, name: str, storage: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """One `harness run` of the spec against a fresh sim on `storage`; its request records."""
    monkeypatch.setenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", str(storage))
    spec = write_spec(
        tmp_path,
        "l3",
        shared_prefix(
            groups=2, prompts_per_group=2, system_prompt_tokens=400, question_tokens=16, output_tokens=4
        ),
        api="sglang-generate",
        tokenizer="word",
        concurrency=1,
        seeds=[0],
        timeouts=dict(TIMEOUTS),
    )
    cap = tmp_path / f"cap-{name}"
    (tmp_path / name).mkdir()
    server = SimProc(tmp_path / name, *SIM_L3, timeout=60.0)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "harness", "run", str(spec), "--server-url", server.url,
             "--server", name, "--node", "n", "--capture", str(cap), "--quiet"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == 0, run.stdout + run.stderr
    finally:
        server.stop()
    (records,) = list(cap.rglob("requests.jsonl"))
    return [json.loads(line) for line in records.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_two_sim_processes_share_a_storage_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    storage = tmp_path / "l3"
    first = _run_point(tmp_path, "first", storage, monkeypatch)
    assert first and all(r["ok"] for r in first)
    assert all(not r["cached_storage"] for r in first)
    assert any(r["cached_storage"] is None for r in first)  # a full miss: cached_tokens_details null (0.5.23)
    assert FileStore(storage, "_sim-tiny_0_1").pages() > 400  # every page written through
    second = _run_point(tmp_path, "second", storage, monkeypatch)  # a fresh server, same directory
    hits = [r["cached_storage"] for r in second]
    assert sum(1 for h in hits if h and h >= 256) == 2, hits  # each group's first prompt: from storage
    for r in second:
        assert r["cached_device"] + r["cached_host"] + r["cached_storage"] == (r["cached_tokens"] or 0)
    empty = _run_point(tmp_path, "empty", tmp_path / "empty-l3", monkeypatch)
    assert all(not r["cached_storage"] for r in empty)


def test_no_host_room_for_the_prefetch_is_host_capacity(tmp_path: Path):
    """SGLang 0.5.23 on CPU (1,200-token pool, --hicache-ratio 1): a 600-token prefix evicted from device and
    host came back from storage as 600 hit tokens, all unfulfilled with reason host_capacity: the host pool
    held only copies of device-resident nodes, none evictable."""
    a = ids(600, 1)
    cfg = config(tmp_path / "l3", pool_tokens=1200, hicache_ratio=1.0)
    done, eng = serve(cfg, [a] + [ids(500, 10 + k) for k in range(6)] + [a + [7]])
    last = done[-1]
    assert eng.stats.storage_hit_tokens == 600 and last.cached_storage == 0
    assert eng.stats.storage_unfulfilled == {"host_capacity": 600}
    # a 2x host pool has host leaves to evict for it: the prefetch lands
    done2, eng2 = serve(
        config(tmp_path / "l3b", pool_tokens=1200, hicache_ratio=2.0),
        [a] + [ids(500, 10 + k) for k in range(9)] + [a + [7]],
    )
    assert (done2[-1].cached_device, done2[-1].cached_host, done2[-1].cached_storage) == (0, 0, 600)
    assert eng2.stats.storage_unfulfilled == {}


def serve_together(cfg: EngineConfig, prompts: list[list[int]]) -> dict[str, SimRequest]:
    """Every prompt received at t=0, in order, on one engine; the finished requests by rid."""
    eng = Engine(cfg)
    done: dict[str, SimRequest] = {}
    eng.on_finish = lambda r: done.__setitem__(r.rid, r)
    for i, p in enumerate(prompts):
        r = SimRequest(rid=str(i), input_ids=p, output_ids=[1, 2, 3], arrival=0.0)
        r.received = 0.0
        eng.add(r)
    t = 0.0
    while eng.busy():
        b = eng.schedule(t)
        assert b is not None
        t += b.duration
        eng.complete(b, t)
    return done


@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
def test_a_request_waiting_for_its_prefetch_lets_later_requests_pass(tmp_path: Path, policy: str):
    """SGLang 0.5.23's _get_new_batch_prefill_raw skips a request whose prefetch has not landed
    (check_prefetch_progress False: `continue`), so the requests behind it run meanwhile."""
    a = ids(4000, 1)
    serve(config(tmp_path / "l3"), [a])  # a is in storage now
    cfg = config(tmp_path / "l3", policy=policy)
    got = serve_together(cfg, [a + [7], ids(300, 2)])
    first, second = got["0"], got["1"]
    assert first.storage_wait_s > 0  # a and its answer (4,000 tokens) from the file backend take a while
    assert first.cached_storage == 4000 and second.cached_storage == 0
    assert second.first_token_time is not None and first.first_token_time is not None
    assert second.first_token_time < first.storage_wait_s <= first.first_token_time
    # best_effort never waits: the same two go in one batch, the first taking nothing from storage
    be = serve_together(config(tmp_path / "l3", policy="best_effort"), [a + [7], ids(300, 2)])
    assert be["0"].storage_wait_s == 0 and be["0"].cached_storage == 0
    assert be["0"].first_token_time == be["1"].first_token_time


def test_the_default_prefetch_policy_is_sglangs_timeout(tmp_path: Path):
    from harness.sim.args import build_parser

    assert build_parser().parse_args([]).hicache_storage_prefetch_policy == "timeout"
    assert EngineConfig().storage_prefetch_policy == "timeout"
