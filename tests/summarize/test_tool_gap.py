"""The tool-gap table (issue 59 item 4): buckets by powers of two up to the p99 gap, the gap measured from
the previous answer's end in the trace's seconds, a full miss's null split read as zeros, the same table
offline from a replay, and live on the sim with a host tier: in the summary, the .md and the page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.summarize.tool_gap import samples
from harness.whatif import serve
from harness.whatif.grid import Config
from harness.whatif.inputs import read_agentic
from harness.whatif.replay import ideal_hits
from harness.whatif.tool_gap import GapSample, edges, gap_table, offline_tool_gap
from tests.helpers.cli import run_bench
from tests.helpers.specs import TIMEOUTS, spec, write_yaml

DATA = Path(__file__).resolve().parents[1] / "data" / "agentic"


def test_edges_are_powers_of_two_up_to_the_p99() -> None:
    assert edges(1870.6) == [0.0, *(2.0**k for k in range(12))]  # 1 s .. 2048 s
    assert edges(3.0) == [0.0, 0.5, 1.0, 2.0, 4.0]  # short gaps: from top / 8
    assert edges(0.0) == [0.0]


def test_gap_table_buckets_and_tiers() -> None:
    rows = [GapSample(0.5, 100, 90, 90, 0, 0)] * 3 + [GapSample(10.0, 100, 60, 20, 40, 0)]
    g = gap_table(rows, speedup=2.0)
    assert g is not None and g.requests == 4 and g.split and g.speedup == 2.0
    got = [
        (r.gap_lo_s, r.gap_hi_s, r.requests, r.device_tokens, r.host_tokens, r.recomputed_tokens)
        for r in g.rows
    ]
    # p99 of the gaps is 9.7 s: buckets to 16 s, the 10 s request in [8, 16)
    assert got == [(0.0, 1.0, 3, 270, 0, 30), (8.0, 16.0, 1, 20, 40, 40)]
    unsplit = gap_table([GapSample(1.0, 100, 50, None, None, None)])
    assert unsplit is not None and not unsplit.split and unsplit.rows[0].device_tokens is None
    assert gap_table([]) is None


def _rec(session: int, turn: int, sched: float, done: float, cached: int, **tiers: Any) -> dict[str, Any]:
    return {
        "session": session,
        "turn": turn,
        "ok": True,
        "scheduled_mono": sched,
        "sent_mono": sched,
        "done_mono": done,
        "prompt_tokens": 100,
        "cached_tokens": cached,
        **{f"cached_{t}": tiers.get(t) for t in ("device", "host", "storage")},
    }


def test_samples_measure_from_the_previous_answer_in_trace_seconds() -> None:
    recs = [
        _rec(0, 1, 12.0, 13.0, 0),  # a full miss: SGLang's details are null, so all zeros
        _rec(0, 0, 0.0, 10.0, 0),
        _rec(1, 0, 0.0, 5.0, 0),
        _rec(1, 1, 5.5, 6.0, 80, device=30, host=50),
        {**_rec(1, 2, 9.0, 9.5, 80), "ok": False},  # failed: not a sample
        {**_rec(2, 1, 1.0, 2.0, 0), "warmup": True},
    ]
    got = sorted(samples(recs, speedup=10.0), key=lambda s: s.gap_s)
    assert [(s.gap_s, s.cached, s.device, s.host) for s in got] == [(5.0, 80, 30, 50), (20.0, 0, 0, 0)]


def test_offline_table_from_a_replay_shows_the_host_tier_keeping_long_gaps() -> None:
    """The sample on a pool of 2,048 blocks (the live sample's 16,384 tokens at block_tokens 8): the
    host tier turns the long gaps' recomputation into host hits; the short gaps are the same."""
    trace = read_agentic(DATA)
    ideal = ideal_hits(trace)
    tables = [
        offline_tool_gap(trace, serve.engine(trace, Config("lru", 2048, host_ratio=h), ideal)) for h in (0, 4)
    ]
    gpu, hicache = tables
    assert gpu is not None and hicache is not None and gpu.requests == hicache.requests == 61
    assert gpu.source == "replay" and gpu.gap_p99_s == pytest.approx(1870.6, abs=0.1)
    assert sum(r.host_tokens or 0 for r in gpu.rows) == 0
    assert sum(r.host_tokens or 0 for r in hicache.rows) > 0
    long_gpu = sum(r.recomputed_tokens for r in gpu.rows if r.gap_lo_s >= 64)
    long_hi = sum(r.recomputed_tokens for r in hicache.rows if r.gap_lo_s >= 64)
    assert long_hi < long_gpu / 2
    short = [
        (r.requests, r.recomputed_tokens) for r in gpu.rows if r.gap_hi_s is not None and r.gap_hi_s <= 32
    ]
    assert short == [
        (r.requests, r.recomputed_tokens) for r in hicache.rows if r.gap_hi_s is not None and r.gap_hi_s <= 32
    ]


@pytest.mark.slow
def test_live_tool_gap_in_the_summary_the_md_and_the_page(tmp_path: Path) -> None:
    """Three agents over the five sample conversations on the sim with a host tier: every returning
    request is in the summary's table, split by tier, and the table is in the .md and the page."""
    args = ["--card-profile", "tiny-test", "--time-scale", "0.0005", "--max-total-tokens", "8192"]
    server = {
        "name": "hicache",
        "launch": "sim",
        "args": [*args, "--enable-hierarchical-cache", "--hicache-ratio", "4", "--enable-cache-report"],
    }
    wl = {
        "kind": "trace",
        "format": "agentic",
        "path": str(DATA),
        "block_tokens": 4,
        "speedup": 2000,
        "max_output_tokens": 8,
        "agents": 3,
    }
    raw = {
        **spec("agentic", wl, api="sglang-generate"),
        "concurrency": 3,
        "timeouts": TIMEOUTS,
        "servers": [server],
    }
    r = run_bench(tmp_path, "--spec", str(write_yaml(tmp_path / "a.yaml", raw)), timeout=240)
    assert r.returncode == 0 or "flagged points (client-late" in r.stdout, r.stdout + r.stderr
    summary = json.loads((tmp_path / "summaries" / "n.json").read_text())
    (point,) = summary["points"]
    g = point["tool_gap"]
    assert g["requests"] == 66 - 5 and g["split"] and g["speedup"] == 2000
    assert g["gap_p50_s"] == pytest.approx(6.0, rel=0.2)  # the trace's think times, not the run's
    assert sum(row["requests"] for row in g["rows"]) == 61
    assert sum(row["host_tokens"] for row in g["rows"]) > 0  # the host tier brought a context back
    for row in g["rows"]:
        parts = row["device_tokens"] + row["host_tokens"] + row["storage_tokens"] + row["recomputed_tokens"]
        assert parts == row["prompt_tokens"]
    md = (tmp_path / "summaries" / "n.md").read_text()
    assert "### What a tool gap costs" in md
    assert "| server | point | gap (s) | requests | device % | host % | storage % | recomputed % |" in md
    assert md.count("| hicache | default | ") >= len(g["rows"])
    page = (tmp_path / "summaries" / "n.html").read_text()
    assert 'data-table="tool-gap"' in page and 'class="tool-gap"' in page
    assert (tmp_path / "summaries" / "n-agentic-tool-gap.png").is_file()
