"""advise's one replay pool (harness.advise.replays): jobs on two forked workers return what the same jobs
return inline, the longest kinds start first, a dropped job never runs, a failing job raises in the
caller, and advise's rows at load (replayed beside the L3 step) equal the at-load step's own replays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.advise.advice import Options, advise, check
from harness.advise.load import load_of, shown_at_load
from harness.advise.replays import Replays, Work
from harness.sim.timing import resolve_profile
from harness.whatif.grid import Config
from harness.whatif.inputs import read_mooncake
from harness.whatif.trace import Trace

MOONCAKE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def _trace(n: int = 300) -> Trace:
    t = read_mooncake(MOONCAKE)
    t.requests = t.requests[:n]
    return t


def _work(t: Trace) -> Work:
    from harness.advise.load import at_load

    return Work(
        t, resolve_profile("h100", "llama-3.1-8b-instruct"), None, at_load(t, load_of(t, speedup=2.0))
    )


def _figures(kind: str, got: Any) -> object:
    """A job's answer without its wall-clock seconds."""
    if kind in ("grid", "storage"):
        res, mod = got
        return res.hit_rate, res.cached_per_request, res.evicted_tokens, mod.ttft_ms
    if kind == "curve":
        return got.hit_rate, got.cached_per_request
    res, ttft, span = got
    return res.hit_rate, [None if x != x else x for x in ttft], span  # nan: no first token


JOBS = [
    ("grid", Config("lru", 200)),
    ("grid", Config("lfu", 200, 2.0, "write_through")),
    ("curve", Config("lru", 200, mode="exact")),
    ("load", Config("lru", 200, 2.0, "write_back")),
    ("storage", Config("lru", 200, 2.0, "write_through", storage="file")),
]


def test_jobs_on_the_pool_return_what_they_return_inline() -> None:
    t = _trace()
    w = _work(t)
    with Replays(w, 1) as inline:
        one = inline.gather([inline.submit(k, c) for k, c in JOBS])
    with Replays(w, 2) as pool:
        two = pool.gather([pool.submit(k, c) for k, c in JOBS])
    assert [_figures(k, g) for (k, _), g in zip(JOBS, one, strict=True)] == [
        _figures(k, g) for (k, _), g in zip(JOBS, two, strict=True)
    ]


def test_the_queue_starts_the_long_kinds_first_and_drops_what_nobody_needs() -> None:
    t = _trace(50)
    with Replays(_work(t), 2) as pool:
        late = pool.submit("curve", Config("lru", 100, mode="exact"))
        grid = pool.submit("grid", Config("lru", 100))
        first = pool.submit("storage", Config("lru", 100, 2.0, "write_through", storage="file"))
        gone = pool.submit("load", Config("lru", 120))
        assert [q[2][0] for q in sorted(pool._queue)] == ["storage", "load", "grid", "curve"]
        pool.drop([gone])
        assert gone.cancelled() and [q[2][0] for q in sorted(pool._queue)] == ["storage", "grid", "curve"]
        assert len(pool.gather([first, grid, late])) == 3
        assert not pool._queue and not pool._running


def test_a_failing_job_raises_in_the_caller() -> None:
    t = _trace(50)
    with Replays(_work(t), 2) as pool:
        bad = pool.submit("grid", Config("no-such-policy", 100))
        with pytest.raises(ValueError, match="no-such-policy"):
            pool.gather([bad])
    with pytest.raises(ValueError, match="unknown replay kind 'fleet'"):
        Replays(_work(t), 1).submit("fleet", Config("lru", 100))


def test_advises_rows_at_load_equal_the_at_load_steps_own(tmp_path: Path) -> None:
    t = _trace(600)
    p = tmp_path / "t.jsonl"
    p.write_text("".join(line for line in MOONCAKE.read_text().splitlines(keepends=True)[:600]))
    opts = Options(card="h100", model="llama-3.1-8b-instruct", host_memory_gb=256, workers=2)
    prof = check([p], opts)
    load = load_of(t, speedup=2.0)
    a = advise(p, opts, prof, load=load)
    assert a.load == load and [r.role for r in a.at_load][:2] == ["recommendation", "today"]
    again = shown_at_load(a, a_trace(p, opts), load, prof, workers=2)

    def strip(rows: list) -> list:
        return [r.to_dict() | {"seconds": 0} for r in rows]

    assert strip(a.at_load) == strip(again)
    assert "at_load" in a.seconds


def a_trace(p: Path, opts: Options) -> Trace:
    from harness.whatif.inputs import read_input

    return read_input(p, opts.block_size)
