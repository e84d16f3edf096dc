"""The scheduler in virtual time: admission, chunked prefill, caching, eviction, retraction, load-back."""

from __future__ import annotations

import random

from harness.sim.engine import Engine, EngineConfig, SimRequest
from harness.sim.logfmt import decode_line, prefill_line
from harness.sim.simulate import simulate


def req(rid: str, ids: list[int], out: int = 8, at: float = 0.0) -> SimRequest:
    return SimRequest(rid=rid, input_ids=list(ids), output_ids=list(range(out)), arrival=at)


def rand_ids(n: int, seed: int) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(4900) for _ in range(n)]


class Log:
    def __init__(self) -> None:
        self.prefills: list[dict] = []
        self.decodes: list[dict] = []

    def prefill(self, **f) -> None:
        prefill_line(**f)  # the fields must format
        self.prefills.append(f)

    def decode(self, **f) -> None:
        decode_line(**f)
        self.decodes.append(f)


def test_shared_prefix_is_cached_after_the_first_request():
    system = rand_ids(500, 1)
    reqs = [req(str(i), system + rand_ids(20, 100 + i), at=i * 1.0) for i in range(4)]
    done = simulate(reqs, EngineConfig(pool_tokens=10_000, card="tiny-test"))
    by = {r.rid: r for r in done}
    assert by["0"].cached_tokens == 0
    for i in "123":
        assert by[i].cached_device == 500 and by[i].cached_host == 0
        assert by[i].generated == 8 and by[i].first_token_time < by[i].finish_time


def test_cached_prompt_has_shorter_ttft_and_time_is_virtual():
    p = rand_ids(3000, 2)
    done = simulate(
        [req("a", p, at=0.0), req("b", p, at=100.0)], EngineConfig(pool_tokens=20_000, card="l4-8b")
    )
    a, b = sorted(done, key=lambda r: r.rid)
    assert a.first_token_time - a.arrival > 1.5  # 3,000 tokens at ~1,600 token/s
    assert b.first_token_time - b.arrival < 0.1
    assert b.cached_device == 2999  # at most len - 1: one token is always computed


def test_chunked_prefill_splits_a_long_prompt_and_logs_each_chunk():
    log = Log()
    done = simulate(
        [req("a", rand_ids(5000, 3), out=3)],
        EngineConfig(pool_tokens=20_000, card="tiny-test", chunked_prefill_size=2048),
        log=log,
    )
    assert [p["new_token"] for p in log.prefills] == [2048, 2048, 904]
    assert [p["pending_token"] for p in log.prefills] == [2952, 904, 0]
    assert done[0].generated == 3


def test_small_pool_evicts_and_accounting_stays_consistent():
    cfg = EngineConfig(pool_tokens=3000, card="tiny-test", chunked_prefill_size=1024)
    eng = Engine(cfg)
    prompts = [rand_ids(700, 10 + i) for i in range(8)]
    t = 0.0
    for i, p in enumerate(prompts * 2):
        eng.add(req(str(i), p, out=16))
    while eng.busy():
        b = eng.schedule(t)
        assert b is not None
        assert eng.available() >= 0
        assert eng.private_total == sum(r.private for r in eng.running) + (
            eng.chunked.private if eng.chunked else 0
        ) + sum(r.private for r, _ in b.parts if r not in eng.running and r is not eng.chunked)
        assert eng.tree.device_size() + eng.private_total <= cfg.pool_tokens
        t += b.duration
        eng.complete(b, t)
    assert eng.tree.stats.evicted_tokens > 0
    assert eng.private_total == 0 and eng.tree.protected_size() == 0


def test_decode_out_of_room_retracts_instead_of_evicting_locked_nodes():
    # admission reserves only a decaying fraction of each output, so long answers outgrow the pool
    cfg = EngineConfig(pool_tokens=3000, card="tiny-test", max_running_requests=8)
    reqs = [req(str(i), rand_ids(50, 20 + i), out=2000) for i in range(3)]
    done = simulate(reqs, cfg)
    assert all(r.generated == 2000 and r.finish_reason == "length" for r in done)
    assert sum(r.retractions for r in done) >= 1


def test_disable_radix_cache_never_hits():
    p = rand_ids(300, 4)
    done = simulate(
        [req("a", p), req("b", p, at=5.0)],
        EngineConfig(pool_tokens=5000, card="tiny-test", disable_radix_cache=True),
    )
    assert all(r.cached_tokens == 0 for r in done)


def test_hicache_loads_back_host_hits():
    prompts = [rand_ids(800, 30 + i) for i in range(5)]
    seq = [prompts[0], prompts[0]] + [p for p in prompts[1:] for _ in range(2)] + [prompts[0]]
    reqs = [req(str(i), p, out=4, at=i * 10.0) for i, p in enumerate(seq)]
    dev_only = simulate(reqs, EngineConfig(pool_tokens=2500, card="tiny-test"))
    reqs = [req(str(i), p, out=4, at=i * 10.0) for i, p in enumerate(seq)]
    hi = simulate(reqs, EngineConfig(pool_tokens=2500, card="tiny-test", hicache=True, hicache_ratio=4.0))
    last_dev = next(r for r in dev_only if r.rid == str(len(seq) - 1))
    last_hi = next(r for r in hi if r.rid == str(len(seq) - 1))
    assert last_dev.cached_tokens == 0
    assert last_hi.cached_host >= 700 and last_hi.cached_tokens <= 799


def test_closed_loop_follow_ups():
    """on_finish can submit the next turn, which then hits the previous turn's prompt + answer."""
    first = req("t0", rand_ids(100, 5), out=10)

    def next_turn(r: SimRequest, now: float):
        if r.rid == "t0":
            yield req("t1", r.input_ids + r.output_ids + rand_ids(5, 6), out=4, at=now + 1.0)

    done = simulate([first], EngineConfig(pool_tokens=5000, card="tiny-test"), on_finish=next_turn)
    t1 = next(r for r in done if r.rid == "t1")
    assert t1.cached_device == 100 + 10 - 1
    assert t1.arrival >= first.finish_time + 1.0


def test_decode_lines_every_interval():
    log = Log()
    simulate(
        [req("a", rand_ids(50, 7), out=41)],
        EngineConfig(pool_tokens=5000, card="tiny-test", decode_log_interval=10),
        log=log,
    )
    assert len(log.decodes) == 4  # 40 decode steps after the prefill's first token
    assert all(d["running_req"] == 1 for d in log.decodes)
