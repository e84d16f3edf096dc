"""Findings in words: stated only where the seeds support them, with numbers, spread and caveats."""

from __future__ import annotations

from typing import Any

import pytest

from harness.report import markdown
from harness.report.common import as_points, as_servers
from harness.report.findings import ab_findings, findings, policy_findings
from harness.summary import parse_summary

SIM_TEL = {"status": "sim server: no GPU to sample", "n_samples": 0}
NO_TEL = {"verdict": "no-telemetry", "reasons": ["sim server: no GPU to sample"], "flagged": False}
OK = {"verdict": "ok", "reasons": [], "flagged": False}


def _point(server: str, sweep: dict[str, Any], seeds: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    key = ",".join(f"{k}={v}" for k, v in sweep.items()) or "default"
    return {
        "experiment": extra.pop("experiment", "x"),
        "server": server,
        "sweep": sweep,
        "point_key": key,
        "status": "ok",
        "median": seeds[0],
        "seeds": {str(i): {"status": "ok", "figures": f} for i, f in enumerate(seeds)},
        "verdict": extra.pop("verdict", NO_TEL),
        "telemetry": extra.pop("telemetry", SIM_TEL),
        **extra,
    }


def _ab(ttft: dict[int, tuple[list[float], list[float]]], **extra: Any) -> list[dict[str, Any]]:
    """gpu-only vs hicache: per group count, each server's per-seed modelled TTFT p50 in ms."""
    out = []
    for g, (a, b) in ttft.items():
        for name, vals in (("gpu-only", a), ("hicache", b)):
            seeds = [{"modelled": {"ttft_ms": {"p50": v}}, "ttft_median_s": v / 50000} for v in vals]
            out.append(_point(name, {"groups": g}, seeds, modelled={"ttft_ms": {"p50": vals[0]}}, **extra))
    return out


SERVERS_AB = {
    "gpu-only": {
        "args": ["--max-total-tokens", "24094"],
        "pool": {"device_tokens": 24094},
        "time_scale": 0.02,
    },
    "hicache": {
        "args": ["--max-total-tokens", "24094", "--enable-hierarchical-cache"],
        "pool": {"device_tokens": 24094, "host_tokens": 96376},
        "time_scale": 0.02,
        "server_info": {"card": {"name": "l4"}},
    },
}


def test_ab_states_the_factor_where_seeds_separate_and_not_where_they_overlap() -> None:
    pts = _ab(
        {
            4: ([1400, 1420, 1390], [1380, 1430, 1400]),  # overlapping seeds: no claim
            16: ([4500, 4600, 4400], [1250, 1300, 1200]),  # every seed apart: 3.6x
            64: ([8000, 7900, 8100], [4000, 4100, 3900]),
        }
    )
    said = ab_findings(as_points(pts), as_servers(SERVERS_AB))
    assert said[0].startswith(
        "HiCache (`hicache`) cut the modelled median TTFT of `gpu-only` by 3.6× at 16 groups"
    )
    assert "(seeds 3.5–3.7×)" in said[0] and "2.0× at 64 groups" in said[0]
    assert " at 4 groups" not in said[0]
    assert said[1].startswith(
        "At 4 groups the two differ by less than the seed spread, the 95 % interval or 5 % (`gpu-only` "
    )
    assert said[1].endswith("): there `hicache` did not matter.") and "seeds 1,390–1,420 ms" in said[1]
    assert (
        said[-1] == "These timings are unchecked: no telemetry (the sim's model of the l4 card, not a card)."
    )
    assert 2 <= len(said) <= 4


def test_ab_within_the_spread_everywhere_claims_nothing() -> None:
    pts = _ab({4: ([100, 130, 90], [110, 95, 125]), 16: ([200, 260, 180], [250, 190, 210])})
    said = ab_findings(as_points(pts), as_servers(SERVERS_AB))
    assert not any("cut" in s or "raised" in s for s in said)
    assert said[0].startswith("At 4 and 16 groups the two differ by less than the seed spread")


def test_ab_one_seed_says_the_spread_is_unknown() -> None:
    pts = _ab({4: ([100], [104])})
    said = ab_findings(as_points(pts), as_servers(SERVERS_AB))
    assert said[0] == (
        "At 4 groups `gpu-only` and `hicache` ran one seed each: too few to state a difference in "
        "modelled median TTFT (`gpu-only` 100 ms; `hicache` 104 ms)."  # no seed range made of one seed
    )
    # the same figure on both sides (a sim's modelled clock often is): said as such, not as a doubt
    same = ab_findings(as_points(_ab({2: ([212], [212]), 4: ([211], [211])})), as_servers(SERVERS_AB))
    assert same[0] == (
        "At 2 and 4 groups `gpu-only` and `hicache` ran one seed each, with the same modelled median TTFT "
        "(2 groups: `gpu-only` 212 ms; `hicache` 212 ms)."
    )


def test_ab_caveat_names_a_flagged_point() -> None:
    hot = {"verdict": "thermal", "reasons": ["thermal"], "flagged": True}
    pts = _ab(
        {16: ([4500, 4600, 4400], [1250, 1300, 1200])}, verdict=hot, telemetry={"thermal_fraction": 0.3}
    )
    said = ab_findings(as_points(pts), as_servers(SERVERS_AB))
    assert said[-1].startswith("Caveat: gpu-only groups=16 (thermal in 30%)")


def _policy_point(policy: str, pool: int, later: list[float], flags: dict[str, Any] | None = None) -> dict:
    seeds = [
        {
            "hit_rate_usage_by_turn": {"0": 0.03, "1": 0.88, "2": 0.92, "3": v, "4": v, "5": v},
            "hit_rate_usage": v,
        }
        for v in later
    ]
    p = _point(f"{policy}-{pool}", {}, seeds, workload_kind="multi-turn", **(flags or {}))
    return p


def _policy_servers(names: list[str]) -> dict[str, Any]:
    return {
        n: {"args": ["--radix-eviction-policy", n.split("-")[0], "--max-total-tokens", n.split("-")[1]]}
        for n in names
    }


def test_policy_names_the_winner_only_when_the_seeds_support_it() -> None:
    pts = [
        _policy_point("lru", 8192, [0.25, 0.23, 0.27]),
        _policy_point("lfu", 8192, [0.60, 0.61, 0.62]),  # overlaps slru: no single winner
        _policy_point("slru", 8192, [0.62, 0.615, 0.63]),
        _policy_point("lru", 16384, [0.951, 0.950, 0.952]),
        _policy_point("lfu", 16384, [0.951, 0.950, 0.952]),
    ]
    said = policy_findings(as_points(pts), as_servers(_policy_servers([p["server"] for p in pts])))
    assert said[0].startswith(
        "At pool 8192, slru and lfu held the later-turn (turns 4–6) hit rate best, within"
    )
    assert "slru 62.0 % (seeds 61.5–63.0)" in said[0] and "above lru 25.0 % (seeds 23.0–27.0)" in said[0]
    assert said[1].startswith(
        "At pool 16384 the policies' later-turn (turns 4–6) hit rates are within the seed"
    )
    assert "did not matter" in said[1]
    assert said[2].startswith("Hit rates do not depend on clocks")

    # seeds that agree exactly separate any difference, but 0.3 points is not called a difference
    tie = [_policy_point("lfu", 8192, [0.626] * 3), _policy_point("slru", 8192, [0.623] * 3)]
    said_tie = policy_findings(as_points(tie), as_servers(_policy_servers([p["server"] for p in tie])))
    assert "did not matter" in said_tie[0] and "held" not in said_tie[0]

    pts[1] = _policy_point("lfu", 8192, [0.50, 0.51, 0.52])  # now slru beats every other seed
    said = policy_findings(as_points(pts), as_servers(_policy_servers([p["server"] for p in pts])))
    assert said[0].startswith("At pool 8192, slru held the later-turn (turns 4–6) hit rate best: 62.0 %")


def test_policy_caveat_for_a_warm_cache_and_markdown_opens_with_the_findings() -> None:
    pts = [
        _policy_point("lru", 8192, [0.25, 0.23, 0.27]),
        _policy_point("slru", 8192, [0.62, 0.615, 0.63], {"cache_state": "warm-start"}),
    ]
    servers = _policy_servers([p["server"] for p in pts])
    said = policy_findings(as_points(pts), as_servers(servers))
    assert said[-1].startswith("Caveat: slru-8192 default (sim: no GPU, warm-start)")
    summary = {"schema_version": 2, "node": "n", "points": pts, "experiments": {"x": {"servers": servers}}}
    assert findings(parse_summary(summary)) == {"x": said}
    md = markdown.render(summary)
    assert md.split("## x\n\n", 1)[1].startswith(" ".join(said))


def test_ttft_chart_plots_modelled_time_or_says_it_is_a_sims_wall_clock(monkeypatch, tmp_path) -> None:
    from harness.report import charts

    seen: list[Any] = []
    monkeypatch.setattr(charts, "_save", lambda fig, path: seen.append(fig) or path)
    summary = {"schema_version": 2, "node": "n", "points": [], "experiments": {"x": {"servers": SERVERS_AB}}}
    pts = _ab({4: ([1400, 1420, 1390], [1380, 1430, 1400]), 16: ([4500, 4600, 4400], [1250, 1300, 1200])})
    for p in pts:
        p["spread"] = {}
    assert charts.ttft_vs_prompts(summary, "x", pts, tmp_path / "a.png") is not None
    ax = seen[-1].axes[0]
    assert ax.get_ylabel() == "modelled median TTFT (ms)"
    assert ax.lines[0].get_ydata()[1] == 4500  # gpu-only at 16 groups: the modelled p50, not wall ÷ scale
    assert "on the sim's own clock" in " ".join(t.get_text() for t in ax.texts)
    for p in pts:
        p.pop("modelled")
        p["spread"] = {"ttft_median_s": [0.02, 0.03]}
    charts.ttft_vs_prompts(summary, "x", pts, tmp_path / "b.png")
    ax = seen[-1].axes[0]
    assert ax.get_ylabel() == "median TTFT (ms, wall clock)"
    assert "wall clock of a sim at --time-scale 0.02 (50× faster" in " ".join(t.get_text() for t in ax.texts)


@pytest.mark.slow
def test_docs_sample_rewrites_only_the_sample_section(tmp_path) -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    from harness.summarize import summary as summarize
    from tests.helpers.summary_capture import build

    build(tmp_path / "capture")
    out = tmp_path / "summaries" / "l4.json"
    summarize.write_summaries(summarize.summarize([tmp_path / "capture"]), out)
    page = tmp_path / "sample.md"
    page.write_text("# top\n\n<!-- sample:begin -->\nold text\n<!-- sample:end -->\n\n## after\n")
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(
        [sys.executable, str(root / "scripts" / "docs_sample.py"), str(out), "--repeat", str(out)]
        + ["--out", str(tmp_path / "sample"), "--doc", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert text.startswith("# top\n\n<!-- sample:begin -->\nOne run of `make bench NODE=l4`")
    assert text.endswith("<!-- sample:end -->\n\n## after\n") and "old text" not in text
    assert "median over seeds" in text and "[sample/l4.md](sample/l4.md)" in text
    assert "reproduced every figure" in text  # the same summary twice: nothing moved
    assert (tmp_path / "sample" / "l4.json").exists()
    pngs = sorted((tmp_path / "sample").glob("l4-*.png"))  # charts linked from beside the page, not the repo
    assert pngs and all(f"](sample/{png.name})" in text for png in pngs)
    assert json.loads(r.stdout)["doc"] == str(page)
    bad = tmp_path / "NOMARK.md"
    bad.write_text("# no markers\n")
    r = subprocess.run(
        [sys.executable, str(root / "scripts" / "docs_sample.py"), str(out), "--doc", str(bad)]
        + ["--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "markers" in r.stderr and bad.read_text() == "# no markers\n"


def test_servers_side_by_side_on_hit_rate_when_the_policy_table_has_no_pair() -> None:
    def pt(server: str, rates: list[float]) -> dict[str, Any]:
        seeds = [{"hit_rate_usage": r, "hit_rate_usage_by_turn": {"0": 0.1, "1": r}} for r in rates]
        return _point(server, {"concurrency": 8}, seeds, workload_kind="multi-turn")

    servers = {"gpu-only": SERVERS_AB["gpu-only"], "hicache": SERVERS_AB["hicache"]}
    said = findings(
        parse_summary(
            {
                "schema_version": 2,
                "points": [pt("gpu-only", [0.40, 0.41]), pt("hicache", [0.60, 0.62])],
                "experiments": {"x": {"servers": servers}},
            }
        )
    )["x"]
    assert said[0] == (
        "At concurrency=8, `hicache` kept the most prompt tokens cached: 61.0 % (seeds 60.0–62.0), "
        "against `gpu-only` 40.5 % (seeds 40.0–41.0)."
    )
    one = findings(
        parse_summary(
            {
                "schema_version": 2,
                "points": [pt("gpu-only", [0.40]), pt("hicache", [0.60])],
                "experiments": {"x": {"servers": servers}},
            }
        )
    )["x"]
    assert one[0] == (
        "At concurrency=8, one seed each, too few to state a difference (no seed spread, no interval): "
        "`hicache` 60.0 % and `gpu-only` 40.0 %."
    )


def test_a_difference_the_ranges_show_but_the_95_intervals_do_not_is_not_stated() -> None:
    def pt(server: str, rates: list[float]) -> dict[str, Any]:
        seeds = [{"hit_rate_usage": r, "hit_rate_usage_by_turn": {"0": 0.1, "1": r}} for r in rates]
        return _point(server, {"concurrency": 8}, seeds, workload_kind="multi-turn")

    servers = {"gpu-only": SERVERS_AB["gpu-only"], "hicache": SERVERS_AB["hicache"]}

    def said(a: list[float], b: list[float]) -> str:
        s = {"schema_version": 2, "points": [pt("gpu-only", a), pt("hicache", b)]}
        return findings(parse_summary({**s, "experiments": {"x": {"servers": servers}}}))["x"][0]

    # every hicache seed beats every gpu-only seed by more than a point (0.50 > 0.485 + 0.01), but with
    # three seeds this scattered the means' 95% Student-t intervals (0.40–0.67, 0.34–0.55) overlap
    wide = said([0.40, 0.45, 0.485], [0.50, 0.51, 0.60])
    assert "within the seed spread or 95 % interval (or 1 point)" in wide, wide
    # the same medians with tight seeds: both the ranges and the intervals are apart
    tight = said([0.44, 0.45, 0.46], [0.50, 0.51, 0.52])
    assert tight.startswith("At concurrency=8, `hicache` kept the most prompt tokens cached"), tight
