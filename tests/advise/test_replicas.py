"""advise --replicas: the routing policy, a shared L3 across replicas and replicas vs a bigger pool, each
taken only when the replay says it pays; the case where cache_aware's skew costs more than its hits."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from harness.advise.advice import Options, profile_for
from harness.advise.replicas import advise_replicas, chart_svg, markdown
from harness.errors import HarnessError
from harness.whatif.grid import Config
from harness.whatif.inputs import Trace, TraceRequest, read_spec
from tests.helpers.cli import harness
from tests.helpers.specs import shared_prefix, write_spec


def _spec(tmp_path: Path, name: str, concurrency: int, **wl) -> Trace:
    p = write_spec(tmp_path, name, shared_prefix(**wl), api="openai-completions", tokenizer="word",
                   concurrency=concurrency)  # fmt: skip
    return read_spec(p)


def test_groups_that_fit_no_one_replica_route_by_prefix(tmp_path: Path) -> None:
    trace = _spec(
        tmp_path, "groups", 4, groups=6, prompts_per_group=4, system_prompt_tokens=384, question_tokens=16
    )
    ra = advise_replicas(
        trace, Config("lru", 1200), [1, 2, 4], profile_for(Options(card="l4")), slo_ms=500, seeds=3
    )
    actions = [s.action for s in ra.steps]
    assert actions[0] in ("2 replicas: route with cache_aware", "2 replicas: route with prefix_hash"), actions
    assert any(a.startswith("4 replicas: route with") for a in actions), actions
    by = {(r.replicas, r.policy, r.l3, r.pool): r for r in ra.rows}
    rr, ca = by[(4, "round_robin", "-", 1200)], by[(4, "cache_aware", "-", 1200)]
    assert ca.hit_rate > rr.hit_rate + 0.3  # round robin scatters the groups over four small pools
    assert {r.l3 for r in ra.rows} == {"-", "own", "shared"}
    assert (2, ra.steps[0].rows[-1].policy, "-", 2400) in by  # 2 replicas against 1 with twice the pool
    assert all(r.slo_met is not None and len(r.workers_hit_rate) == r.replicas for r in ra.rows)
    md = "\n".join(markdown(ra))
    assert "## Replicas behind smg" in md and "| 4 | cache_aware | 1,200 |" in md
    assert chart_svg(ra).startswith("<svg") and "cache_aware" in chart_svg(ra)


def test_no_sharing_means_no_change_pays() -> None:
    reqs = [TraceRequest(tuple(range(1000 * i, 1000 * i + 64)), 64, float(i), 8, index=i) for i in range(16)]
    trace = Trace("unique", reqs, concurrency=2)
    ra = advise_replicas(trace, Config("lru", 2000), [2], profile_for(Options(card="l4")), seeds=2)
    assert [s.action for s in ra.steps] == [
        "2 replicas: keep round_robin (no routing change pays)",
        "2 replicas: no shared L3 (it does not pay here)",
        "keep 2 replicas (fewer, larger replicas do not pay)",
    ]


def test_one_hot_prefix_cache_aware_keeps_hits_but_loses_on_ttft(tmp_path: Path) -> None:
    trace = _spec(tmp_path, "hot", 16, groups=1, prompts_per_group=64, system_prompt_tokens=2000,
                  question_tokens=64, output_tokens=32)  # fmt: skip
    ra = advise_replicas(trace, Config("lru", 20000), [4], profile_for(Options(card="h100")), seeds=2)
    ca = next(r for r in ra.rows if r.policy == "cache_aware" and r.l3 == "-" and r.replicas == 4)
    rr = next(r for r in ra.rows if r.policy == "round_robin" and r.replicas == 4)
    assert ca.hit_rate > rr.hit_rate and ca.load_skew > 3.5 and ca.ttft_ms["mean"] > rr.ttft_ms["mean"]
    assert any(n.startswith("4 replicas: cache_aware keeps more hits than round_robin") for n in ra.notes)
    assert not ra.steps[0].action.endswith("cache_aware")


def test_each_fleet_is_replayed_once_and_a_pool_gives_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.advise.replicas as replicas_mod

    trace = _spec(tmp_path, "once", 2, groups=3, prompts_per_group=3, system_prompt_tokens=200)
    cases: list = []
    real = replicas_mod.run_cases

    def counting(trace, asked, *args, **kwargs):
        cases.extend(asked)
        return real(trace, asked, *args, **kwargs)

    monkeypatch.setattr(replicas_mod, "run_cases", counting)
    profile = profile_for(Options(card="l4"))
    one = advise_replicas(trace, Config("lru", 1200, 2.0), [2], profile, seeds=3, workers=1)
    keys = [(c.config, c.replicas, c.router.policy, c.router.seed, c.shared_l3) for c in cases]
    assert len(keys) == len(set(keys))  # the L3 step's own host tier is the routing step's row
    assert sum(1 for k in keys if k[1] == 1) == 1  # one replica draws nothing: one replay for its seeds
    two = advise_replicas(trace, Config("lru", 1200, 2.0), [2], profile, seeds=3, workers=2)
    assert [r.to_dict() for r in two.rows] == [r.to_dict() for r in one.rows]


def test_bad_replica_counts_are_refused() -> None:
    with pytest.raises(HarnessError, match="--replicas: 0,2"):
        advise_replicas(Trace("t", []), Config("lru", 10), [0, 2], profile_for(Options(card="l4")))


@pytest.mark.slow
def test_advise_replicas_on_the_command_line(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "sp", shared_prefix(groups=4, prompts_per_group=3, system_prompt_tokens=300),
                      api="openai-completions", tokenizer="word", concurrency=2)  # fmt: skip
    r = harness("advise", str(spec), "--pool", "800", "--replicas", "2,4", "--workers", "1", "--json",
                "-o", str(tmp_path / "o"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["replicas"]
    assert out["replicas"] == [2, 4] and out["steps"] and {row["replicas"] for row in out["rows"]} >= {2, 4}
    html = (tmp_path / "o" / "advise.html").read_text()
    assert "Replicas behind smg" in html and 'aria-label="hit rate by replicas per policy"' in html
    assert "## Replicas behind smg" in (tmp_path / "o" / "advise.md").read_text()
    bad = harness("advise", str(spec), "--replicas", "2,x")
    assert bad.returncode == 2 and "--replicas: bad value 'x'" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("smg") is None and not (Path(sys.executable).parent / "smg").exists(),
                    reason="smg (the router extra) is not installed")  # fmt: skip
def test_confirm_launches_the_chosen_fleet_behind_smg(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "sp", shared_prefix(groups=6, prompts_per_group=4, system_prompt_tokens=384,
                      question_tokens=16), api="openai-completions", tokenizer="word", concurrency=1)  # fmt: skip
    out = tmp_path / "o"
    r = harness("advise", str(spec), "--pool", "1200", "--card", "l4", "--replicas", "2", "--confirm", "1",
                "--workers", "1", "-o", str(out), "--quiet", timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ra = json.loads((out / "advise.json").read_text())["replicas"]
    (fleet,) = ra["confirmed"]
    assert fleet["fleet"].startswith("2 x pool") and fleet["measured_hit_rate"] is not None, fleet
    assert fleet["off_model"] == 0 and len(fleet["workers"]) == 2 and fleet["status"] == "ok", fleet
    for w in fleet["workers"]:  # each worker's cache, replayed with the requests smg sent it
        assert w["requests"] > 0 and abs(w["diff_points"]) <= 0.5, fleet
    info = json.loads(next((out / "confirm" / "replicas").rglob("replicas.json")).read_text())
    assert info["replicas"] == 2 and info["policy"] == fleet["fleet"].rsplit(", ", 1)[1]
    assert "### Confirmed live behind smg" in (out / "advise.md").read_text()
    assert "Confirmed live behind smg" in (out / "advise.html").read_text()


def test_fewer_larger_replicas_only_at_a_pool_a_lever_reaches() -> None:
    """Issue 58: on an H100 with Llama-3.1-8B, FP8 KV at the largest memory fraction holds 1,923 blocks of
    512 tokens; 2 x pool 1,616 against 1 x pool 3,232 compared a pool nothing gives. And a trace's L3 rows
    replay through the scheduler, its host-tier row one request at a time: the step says so."""
    from harness.advise.levers import Levers

    profile = profile_for(Options(card="h100", model="llama-3.1-8b-instruct"))
    top = (Levers(profile, 512).largest_pool_tokens() or 0) // 512
    assert 1616 <= top < 3232
    reqs = [TraceRequest((i % 3, 100 + i), 1024, float(i), 4, index=i) for i in range(12)]
    trace = Trace("blocks", reqs, unit=512, kind="blocks")
    ra = advise_replicas(trace, Config("lru", 1616, 2.0), [2], profile, seeds=1, workers=1)
    pool_step = next(s for s in ra.steps if s.kind == "pool")
    assert pool_step.action == "keep 2 replicas (1 with twice the pool are out of reach)"
    assert f"holds {top:,} blocks a replica" in pool_step.why and not pool_step.taken
    assert all(r.pool <= top for r in ra.rows) and {r.replicas for r in ra.rows} == {2}
    l3_step = next(s for s in ra.steps if s.kind == "l3")
    assert "part of the gap is the replay's, not the L3's" in l3_step.why


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("smg") is None and not (Path(sys.executable).parent / "smg").exists(),
                    reason="smg (the router extra) is not installed")  # fmt: skip
def test_confirm_requests_slices_the_fleets_too(tmp_path: Path) -> None:
    """Issue 58: `--confirm-requests N` said N requests each, then the fleet replayed the whole trace.
    The fleet now replays the same first N requests as the single candidates, at the pools scaled to them."""
    lines = [json.dumps({"hash_ids": [s * 100 + b for b in range(turn + 2)], "input_length": (turn + 2) * 512,
                         "output_length": 1, "timestamp": turn * 1000 + s}) for turn in range(6) for s in range(4)]  # fmt: skip
    trace = tmp_path / "sessions.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o"
    r = harness("advise", str(trace), "--card", "l4", "--replicas", "2", "--confirm", "1", "--confirm-requests",
                "10", "--workers", "1", "-o", str(out), "--quiet", timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    d = json.loads((out / "advise.json").read_text())
    (fleet,) = d["replicas"]["confirmed"]
    assert fleet["status"] == "ok" and sum(w["requests"] for w in fleet["workers"]) == 10, fleet
    assert fleet["slice_requests"] == 10 and fleet["pool"] <= fleet["pool_scaled_from"], fleet
    assert 0 <= fleet["predicted_hit_rate"] <= 1
