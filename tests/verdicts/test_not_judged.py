"""A verdict that could not be judged says so, and why, in the summary, the .md, the page and `harness validate`;
a storm on a server with counters but no KV gauges is named from the counters; a load-back whose allocation
lands in the next scrape is not a storm.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.report.html_page import render as render_page
from harness.report.markdown import render as render_markdown
from harness.spec import load_spec
from harness.summarize.summary import summarize, write_summaries
from harness.summary.funnel import HicacheFunnel
from harness.sweep.attach import run_attached
from harness.verdicts.coverage import counter_storm, eviction_gaps, inert_gaps
from harness.verdicts.health import eviction_verdict
from tests.helpers import specs
from tests.helpers.cli import harness
from tests.helpers.metrics_script import page

N = 12
WORKLOAD = specs.shared_prefix(groups=2, prompts_per_group=6, system_prompt_tokens=200, question_tokens=16,
                               output_tokens=4)  # fmt: skip
GAUGES = ("sglang:kv_available_tokens", "sglang:max_total_num_tokens")


def _tick(t: float, ev: float, free: float, loaded: float) -> dict:
    values = {
        "evicted_tokens": ev,
        "kv_available_tokens": free,
        "load_back_tokens": loaded,
        "pool_tokens": 4000.0,
    }
    return {"t_mono": t, "source": "w0", "values": values}


def test_a_load_back_whose_allocation_lands_in_the_next_scrape_is_not_a_storm():
    # the CI false alarm's shape: 2,435 tokens evicted beside a load-back, free at that scrape, used by the
    # allocation the next scrape sees; judged per tick alone it read as 0.9x needed with all of it "still free"
    split = [
        _tick(0.0, 0, 0, 0),
        _tick(0.2, 2435, 2435, 400),
        _tick(0.4, 2435, 40, 400),
        _tick(0.6, 2435, 40, 400),
    ]
    assert eviction_verdict("0", split, 0.0) is None
    # SGLang refreshes its KV gauges when it logs a batch: two scrapes repeat the stale free count before the
    # refresh shows the allocation; judged up to the refresh, not a storm either
    stale = [
        _tick(0.0, 0, 0, 0),
        _tick(0.2, 2435, 2435, 400),
        _tick(0.4, 2435, 2435, 400),
        _tick(0.6, 2435, 40, 400),
    ]
    assert eviction_verdict("0", stale, 0.0) is None
    # the same eviction still free at the next scrape: load-back evicting others
    storm = [_tick(0.0, 0, 0, 0), _tick(0.2, 2435, 2435, 400), _tick(0.4, 2435, 2300, 400)]
    got = eviction_verdict("0", storm, 0.0)
    assert got is not None and got.verdict == "evict-storm" and got.evidence == "kv-gauges", got
    assert got.figures["free_after_load_back_evictions_tokens"] == 2300


def test_counters_alone_name_a_storm_far_beyond_what_allocations_could_need():
    cf = {
        "evicted_tokens": 96000.0,
        "prompt_tokens": 2592.0,
        "cached_tokens": 96.0,
        "generation_tokens": 48.0,
    }
    v, why = counter_storm("0", cf, [0.0, 1.0])
    assert why is None and v is not None and v.verdict == "evict-storm" and v.evidence == "counters"
    assert v.figures["ratio_to_allocations"] == pytest.approx(96000 / (2592 - 96 + 48), abs=0.01)
    # a healthy pool evicts at most what it took in: not a storm, but counters cannot see a storm of reusable
    # prefixes, so the point says it was judged on counters only
    v, why = counter_storm("0", {**cf, "evicted_tokens": 2000.0}, [0.0, 1.0])
    assert v is None and why is not None and "counters only (0.79x" in why.why, why
    # without a prompt counter there is nothing to weigh evictions against: said, not silent
    v, why = counter_storm("0", {"evicted_tokens": 96000.0}, [0.0, 1.0])
    assert v is None and why is not None and why.verdict == "evict-storm" and "prompt" in why.why


def test_each_gap_of_the_timeline_is_named():
    assert eviction_gaps("0", []) == (eviction_gaps("0", [])[0], True)
    assert [g.verdict for g in eviction_gaps("0", [])[0]] == ["evict-storm", "over-eviction"]
    no_gauges = [
        {"t_mono": 0.0, "values": {"evicted_tokens": 0.0}},
        {"t_mono": 1.0, "values": {"evicted_tokens": 900.0}},
    ]
    gaps, by_counters = eviction_gaps("0", no_gauges)
    assert by_counters and [(g.verdict, "no KV gauges" in g.why) for g in gaps] == [("over-eviction", True)]
    few = [_tick(0.0, 0, 10, 0), _tick(1.0, 100, 10, 0)]
    gaps, by_counters = eviction_gaps("0", few)
    assert not by_counters and {g.verdict for g in gaps} == {"evict-storm", "over-eviction"}
    assert all("too few evictions (100 tokens < 256)" in g.why for g in gaps)
    assert eviction_gaps("0", [_tick(0.0, 0, 10, 0), _tick(1.0, 0, 10, 0)]) == ([], False)  # nothing evicted
    # SGLang on CPU: evictions and load-backs counted in different scrapes, so none beside a load-back
    apart = [_tick(0.0, 0, 10, 0), _tick(1.0, 1187, 11, 0), _tick(2.0, 1187, 372, 508)]
    (g,) = eviction_gaps("0", apart)[0]
    assert g.verdict == "evict-storm" and g.why.startswith("508 tokens loaded back, but only 0 evicted"), g


def test_a_host_tier_without_token_ids_or_host_counters_is_not_judged_inert():
    f = HicacheFunnel(
        backed_up_tokens=800, evicted_tokens=900, host_hit_tokens=0, returning_why_none="no spec"
    )
    (g,) = inert_gaps("0", f)
    assert (
        g.verdict == "host-tier-inert" and "token ids sent are unknown" in g.why and g.why.endswith("no spec")
    )
    (g,) = inert_gaps("0", HicacheFunnel(backed_up_tokens=800, returning_off_device_tokens=500))
    assert "no host-hit counter" in g.why
    assert inert_gaps("0", HicacheFunnel(host_hit_tokens=0, returning_off_device_tokens=500)) == []


def test_an_inert_host_tier_is_named_from_the_workloads_structure_when_ids_are_unknown():
    from harness.verdicts.health import host_tier_inert

    f = HicacheFunnel(backed_up_tokens=800, evicted_tokens=900, host_hit_tokens=0, returning_off_device_tokens=500,
                      returning_basis="workload-structure", returning_why_none="tokenizer unknown")  # fmt: skip
    v = host_tier_inert("0", f, [0.0, 1.0])
    assert v is not None and v.evidence == "workload-structure" and "workload's own repeats" in v.reason, v


def _no_gauge_script(path: Path) -> Path:
    """A host tier that evicts 8,000 tokens per request (~38x what it takes in) and exports no KV gauges."""
    pages = []
    for k in range(N + 1):
        p = page(k, evicted=8000, free=0, backup=200, host_hits=8, load_back=8)
        m = {n: v for n, v in p["metrics"].items() if n not in GAUGES}
        m["sglang:prompt_tokens_total"] = 216 * k
        m["sglang:generation_tokens_total"] = 4 * k
        pages.append({**p, "metrics": m})
    path.write_text(json.dumps({"pages": pages}))
    return path


@pytest.mark.slow
def test_without_gauges_or_token_ids_every_output_says_not_judged_and_the_storm_is_named(
    tmp_path, fake_server_factory, monkeypatch
):
    srv = fake_server_factory(
        "--ttft-ms", "60", "--metrics-script", str(_no_gauge_script(tmp_path / "m.json"))
    )
    spec = load_spec(specs.write_spec(tmp_path, "gaps", WORKLOAD, concurrency=1, seeds=[0]))
    run_attached(
        spec, spec.points(), server_url=srv.url, server_name="fake", node="n", capture=tmp_path / "cap",
        seeds=None, quiet=True, gpus=None, log=lambda _m: None, metrics_interval_s=0.02,
    )  # fmt: skip

    def unknown_ids(
        point_dir: Path, *_info: object
    ) -> None:  # the run's prompts cannot be rebuilt (an unknown tokenizer)
        raise HarnessError(f"{point_dir}: the run's prompts cannot be rebuilt: tokenizer unknown")

    monkeypatch.setattr("harness.whatif.captured.read_capture", unknown_ids)
    (s,) = summarize([tmp_path / "cap" / "n"]).values()
    write_summaries({"n": s}, tmp_path / "summaries")
    data = json.loads((tmp_path / "summaries" / "n.json").read_text())
    (pt,) = data["points"]
    assert [(v["verdict"], v["evidence"]) for v in pt["health"]] == [("evict-storm", "counters")], pt[
        "health"
    ]
    assert pt["health"][0]["figures"]["ratio_to_allocations"] > 30
    # the ids sent are unknown, so the returning tokens come from the workload's own repeats: judged, not silent
    f = pt["hicache_funnel"]["0"]
    assert f["returning_basis"] == "workload-structure" and f["returning_off_device_tokens"] > 0, f
    assert "tokenizer unknown" in f["returning_why_none"]
    gaps = {g["verdict"]: g["why"] for g in pt["not_judged"]}
    assert set(gaps) == {"over-eviction"} and "no KV gauges" in gaps["over-eviction"], gaps
    md = render_markdown(data)
    for verdict, why in gaps.items():
        assert f"not judged: **{verdict}**" in md and why in md, md
    assert "**evict-storm** fake" in md and "[counters]" in md
    html = render_page(data)
    assert "not judged: <strong>over-eviction</strong>" in html and "<strong>evict-storm</strong>" in html
    r = harness("validate", str(tmp_path / "summaries" / "n.json"), timeout=60)
    assert r.returncode == 1 and "health not judged:" in r.stdout and "no KV gauges" in r.stdout, r.stdout
    r = harness("validate", str(tmp_path / "summaries" / "n.json"), "--json", timeout=60)
    out = json.loads(r.stdout)
    assert {g["verdict"] for g in out["not_judged"]} == set(gaps) and out["health"][0][
        "evidence"
    ] == "counters"
