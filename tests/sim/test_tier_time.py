"""What a hit costs per tier (harness.sim.tier_time), the break-even against recomputing, and the host link."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from harness.sim.engine import Engine, EngineConfig, SimRequest
from harness.sim.simulate import simulate
from harness.sim.storage import BACKENDS
from harness.sim.tier_time import (
    HostLink,
    HostTierClock,
    copy_sm_share,
    copy_steal_s,
    device_hit_s,
    host_hit_s,
    recompute_s,
    storage_hit_s,
)
from harness.sim.timing import resolve_profile

H100 = resolve_profile("h100")  # Llama-3.1-8B: 131,072 KV bytes per token
L4 = resolve_profile("l4")


def ids(n: int, seed: int) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(1000, 30000) for _ in range(n)]


def test_one_function_per_tier():
    kv = H100.kv_bytes_per_token
    assert device_hit_s(8192, H100) == 0.0
    assert host_hit_s(8192, H100) == pytest.approx(8192 * kv / (H100.h2d_gb_per_s * 1e9))
    file = BACKENDS["file"]
    assert storage_hit_s(8192, H100, "file") == pytest.approx(
        file.read_time(8192, kv) + host_hit_s(8192, H100)
    )
    assert storage_hit_s(8192, H100, "hf3fs") < storage_hit_s(8192, H100, "file")
    assert recompute_s(8192, H100) == pytest.approx(H100.batch_prefill_time([(8192, 0)]))
    # an L4 recomputes far slower than an H100: the same L3 hit is worth more there
    assert recompute_s(8192, L4) > 5 * recompute_s(8192, H100)


def test_break_even_reproduces_the_operators_ordering():
    """Operators saw a file-backend L3 hit slower than recomputing a mid-size (8K) prompt on a fast GPU,
    and L3 paying off for long prompts on a fast backend."""
    assert storage_hit_s(8192, H100, "file") > recompute_s(8192, H100)
    for fast in ("mooncake", "hf3fs"):
        assert storage_hit_s(65536, H100, fast) < recompute_s(65536, H100)
    assert host_hit_s(8192, H100) < recompute_s(8192, H100)  # the host tier always pays off here


def _ttft_with_l3(tmp_path: Path, n: int, backend: str, fill: bool) -> float:
    """A second server's TTFT for an n-token prompt whose prefix a first server stored (or not)."""
    prompt = ids(n, 1)
    cfg = EngineConfig(
        card="h100-8b",
        hicache=True,
        storage_backend=backend,
        storage_dir=str(tmp_path / f"{backend}-{n}-{fill}"),
        page_size=64,  # as L3 deployments run it (one file per page)
        storage_prefetch_policy="wait_complete",
    )
    if fill:
        simulate([SimRequest(rid="first", input_ids=prompt, output_ids=[1])], cfg)
    (r,) = simulate([SimRequest(rid="second", input_ids=prompt, output_ids=[1])], cfg)
    assert (r.cached_storage > 0) == fill
    assert r.first_token_time is not None
    return r.first_token_time - r.arrival


def test_the_engine_shows_the_same_ordering(tmp_path: Path):
    mid_hit = _ttft_with_l3(tmp_path, 8192, "file", True)
    mid_miss = _ttft_with_l3(tmp_path, 8192, "file", False)
    assert mid_hit > mid_miss  # file L3 slower than recomputing 8K on an H100
    long_hit = _ttft_with_l3(tmp_path, 65536, "mooncake", True)
    long_miss = _ttft_with_l3(tmp_path, 65536, "mooncake", False)
    assert long_hit < long_miss / 3


def test_host_link_lands_copies_in_order():
    link = HostLink(25.0, 131_072)
    one = link.copy_time(1000)
    assert one == pytest.approx(1000 * 131_072 / 25e9)

    class N:
        def __init__(self, n: int) -> None:
            self.key = tuple(range(n))

    link.issue([(1, N(1000))], start=1.0)
    link.issue([(1, N(1000)), (2, N(1000)), (3, N(1000))], start=1.0)  # 1 was queued already
    assert link.free_at == pytest.approx(1.0 + 3 * one)
    assert link.landed_upto(1.0) == 0
    assert link.landed_upto(1.0 + one) == 1
    assert link.landed_upto(1.0 + 3 * one) == 3
    with pytest.raises(ValueError, match="unknown HiCache mechanisms"):
        HostTierClock(("warp_drive",), 25.0, 131_072, False)


def _engine(**kw) -> Engine:
    kw.setdefault("pool_tokens", 20_000)
    return Engine(EngineConfig(card="l4-8b", hicache=True, hicache_ratio=4.0, **kw))


def test_a_backup_stays_locked_until_its_copy_lands():
    eng = _engine()
    r = SimRequest(rid="a", input_ids=ids(4000, 2), output_ids=[1, 2])
    eng.add(r)
    b = eng.schedule(0.0)
    assert b is not None
    eng.complete(b, b.duration)  # the prompt is inserted and backed up: its copy starts now
    copy = eng.hclock.link.copy_time(4000) if eng.hclock else 0.0
    assert eng.tree.pending_backups()
    eng.schedule(b.duration + copy / 2)  # a step before the copy landed: still pending, still locked
    assert eng.tree.pending_backups()
    eng.schedule(b.duration + copy * 1.01)
    assert not eng.tree.pending_backups()
    # without the mechanism the next step acknowledges it at once
    eng2 = _engine(hicache_mechanisms=("layer_overlap",))
    eng2.add(SimRequest(rid="a", input_ids=ids(4000, 2), output_ids=[1, 2]))
    b2 = eng2.schedule(0.0)
    assert b2 is not None
    eng2.complete(b2, b2.duration)
    eng2.schedule(b2.duration)
    assert not eng2.tree.pending_backups()


def test_layer_overlap_and_blocking_write_back_cost_time():
    parts, load = [(64, 2048)], 4096
    with_overlap = L4.prefill_with_load_back(parts, load)
    serial = L4.prefill_with_load_back(parts, load, overlap=False)
    assert serial == pytest.approx(L4.batch_prefill_time(parts) + L4.load_back_time(load))
    assert with_overlap < serial

    def run(mechanisms: tuple[str, ...]) -> float:
        cfg = EngineConfig(
            card="l4-8b",
            pool_tokens=6000,
            hicache=True,
            hicache_ratio=4.0,
            hicache_write_policy="write_back",
            hicache_mechanisms=mechanisms,
        )
        reqs = [
            SimRequest(rid=str(i), input_ids=ids(2500, i), output_ids=[1], arrival=i * 5.0) for i in range(6)
        ]
        done = simulate(reqs, dataclasses.replace(cfg))
        return sum(d.first_token_time - d.arrival for d in done if d.first_token_time is not None)

    # each prompt evicts the last one, which write_back copies to host while the scheduler waits
    assert run(("layer_overlap", "timed_write_acks", "blocking_write_back")) > run(
        ("layer_overlap", "timed_write_acks")
    )


def _drain(eng: Engine, reqs: list[SimRequest], t: float) -> float:
    for r in reqs:
        eng.add(r)
    while eng.busy():
        b = eng.schedule(t)
        assert b is not None
        t += b.duration
        eng.complete(b, t)
    return t


def test_a_loaded_host_hit_is_charged_once_against_the_pool():
    # SGLang charges a loaded host hit through the allocator and the request's lock, and reserves only the
    # extend and max_new on top (schedule_policy.py PrefillAdder._update_prefill_budget ->
    # PrefillBudget.reserve), so a second request still fits beside it in the same batch
    eng = _engine(chunked_prefill_size=0, pool_tokens=6000)
    prefix = ids(2000, 10)
    t = _drain(eng, [SimRequest(rid="a1", input_ids=prefix + ids(8, 11), output_ids=[1])], 0.0)
    t = _drain(eng, [SimRequest(rid="a2", input_ids=prefix + ids(8, 12), output_ids=[1])], t)  # hit: backup
    t = _drain(eng, [SimRequest(rid="b", input_ids=ids(5000, 13), output_ids=[1])], t)  # evicts the prefix
    r1 = SimRequest(rid="r1", input_ids=prefix + ids(64, 14), output_ids=[1])
    r2 = SimRequest(rid="r2", input_ids=ids(2500, 15), output_ids=[1])
    eng.add(r1)
    eng.add(r2)
    b = eng.schedule(t)
    assert b is not None
    assert [r.rid for r, _ in b.parts] == ["r1", "r2"]
    assert r1.cached_host >= 1990 and b.load_back_tokens == r1.cached_host


def test_copy_kernels_take_sms_from_the_forward():
    # --hicache-io-backend kernel copies on 2 thread blocks (DEFAULT_BLOCK_QUOTA); an L4 has 58 SMs
    assert copy_sm_share(L4) == pytest.approx(2 / 58)
    assert copy_sm_share(resolve_profile("tiny-test")) == 0.0
    assert copy_steal_s(0.010, 0.065, 0.5) == pytest.approx(0.005)  # the copy's overlap x the share
    assert copy_steal_s(0.100, 0.065, 0.5) == pytest.approx(0.0325)  # at most the whole forward
    assert copy_steal_s(-0.01, 0.065, 0.5) == 0.0  # a copy that already landed

    def run(mechanisms: tuple[str, ...]) -> tuple[float, float]:
        eng = _engine(chunked_prefill_size=0, pool_tokens=6000, hicache_mechanisms=mechanisms)
        prefix = ids(2000, 20)
        t = _drain(eng, [SimRequest(rid="a1", input_ids=prefix + ids(8, 21), output_ids=[1])], 0.0)
        t = _drain(eng, [SimRequest(rid="a2", input_ids=prefix + ids(8, 22), output_ids=[1])], t)
        t = _drain(eng, [SimRequest(rid="b", input_ids=ids(5000, 23), output_ids=[1])], t)
        eng.add(SimRequest(rid="r", input_ids=prefix + ids(64, 24), output_ids=[1]))
        assert eng.hclock is not None
        writing = max(0.0, eng.hclock.link.free_at - t)  # write-through copies still running at t
        b = eng.schedule(t)
        assert b is not None and b.load_back_tokens >= 1990
        return b.duration, L4.load_back_time(b.load_back_tokens) + writing

    on, copies_s = run(("layer_overlap", "timed_write_acks", "copy_sm_share"))
    off, _ = run(("layer_overlap", "timed_write_acks"))
    # the load and the copies still running both overlap the ~0.3 s forward whole
    assert on - off == pytest.approx(copies_s * 2 / 58, rel=1e-6)


def _suite_median_ttft(point_index: int, mechanisms: tuple[str, ...], link_div: float = 1.0) -> float:
    """The working-set suite's median modelled TTFT (s) at one sweep point, seed 0, HiCache on (as
    benchmarks/hicache_time.py replays it)."""
    from harness.whatif.inputs import read_spec
    from harness.whatif.replay import closed_loop

    base = resolve_profile("l4")
    card = dataclasses.replace(base, h2d_gb_per_s=base.h2d_gb_per_s / link_div)
    cfg = EngineConfig(
        card=card, pool_tokens=24_094, hicache=True, hicache_ratio=4.0, hicache_mechanisms=mechanisms
    )
    trace = read_spec(
        Path(__file__).resolve().parents[2] / "workloads" / "working-set.yaml", point_index=point_index
    )
    first, on_finish = closed_loop(trace)
    done = simulate(first, cfg, on_finish=on_finish)
    ttft = sorted(d.first_token_time - d.arrival for d in done if d.first_token_time is not None)
    return ttft[len(ttft) // 2]


def test_the_suite_ttft_grows_with_groups_only_when_copies_are_slow():
    # the finding of docs/hicache-tiers.md: at the L4's PCIe Gen4 rate the load-backs of 16 groups hide
    # behind the forward; at a sixteenth of it they reach the median; without the overlap they show
    every = ("layer_overlap", "timed_write_acks", "blocking_write_back", "copy_sm_share")
    four, sixteen = _suite_median_ttft(0, every), _suite_median_ttft(1, every)
    assert sixteen == pytest.approx(four, rel=0.02)
    assert _suite_median_ttft(1, every, link_div=16) > 1.5 * _suite_median_ttft(0, every, link_div=16)
    assert _suite_median_ttft(1, every[1:]) > sixteen  # without layer_overlap
