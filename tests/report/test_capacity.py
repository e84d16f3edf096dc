"""The capacity search and the seeds' intervals as the report shows them: the tables, the sentence, the page."""

from __future__ import annotations

from typing import Any

from harness.report import markdown
from harness.report.capacity import capacity_findings, interval_table, search_table
from harness.report.html_page import render as render_page
from harness.summary import parse_summary


def _search(best: int | None, probes: list[tuple[int, str]], stopped: str) -> dict[str, Any]:
    return {
        "knob": "sessions",
        "best": best,
        "probes": [{"value": v, "status": s, "goodput": 1.0 if s == "pass" else 0.4} for v, s in probes],
        "limiting": "ttft_ms",
        "stopped": stopped,
        "complete": True,
        "target": {"slo": {"ttft_ms": 2000}, "goodput": 0.9, "percentile": 99},
    }


def _point(server: str, sessions: int, ttfts: list[float]) -> dict[str, Any]:
    figs = [{"latency": {"ttft_s": {"p50": t}}, "hit_rate_usage": 0.5} for t in ttfts]
    return {
        "experiment": "cap",
        "server": server,
        "sweep": {"sessions": sessions},
        "point_key": f"sessions={sessions}",
        "status": "ok",
        "median": {"latency": {"ttft_s": {"p50": sorted(ttfts)[1]}}, "hit_rate_usage": 0.5},
        "spread": {"latency": {"ttft_s": {"p50": [min(ttfts), max(ttfts)]}}, "hit_rate_usage": [0.5, 0.5]},
        "interval": {"latency.ttft_s.p50": [0.9, 1.3], "hit_rate_usage": [0.5, 0.5]},
        "seeds": {str(i): {"status": "ok", "figures": f} for i, f in enumerate(figs)},
    }


SUMMARY = {
    "schema_version": 2,
    "node": "n",
    "points": [_point("gpu-only", 8, [1.0, 1.1, 1.2]), _point("hicache", 8, [0.4, 0.5, 0.6])],
    "experiments": {
        "cap": {
            "servers": {
                "gpu-only": {
                    "search": _search(
                        8,
                        [(2, "pass"), (4, "pass"), (8, "pass"), (16, "over"), (12, "over")],
                        "over the SLO at 9",
                    )
                },
                "hicache": {
                    "search": _search(
                        14, [(2, "pass"), (16, "saturated"), (14, "pass"), (15, "over")], "over the SLO at 15"
                    )
                },
            }
        }
    },
}


def test_one_sentence_says_how_much_more_the_second_server_takes() -> None:
    servers = parse_summary(SUMMARY).experiments["cap"].servers
    assert capacity_findings(servers) == [
        "`hicache` took 6 more sessions than `gpu-only` (14 against 8) at p99 TTFT ≤ 2000 ms for 0.9 of requests."
    ]
    alone = {"gpu-only": servers["gpu-only"]}
    assert capacity_findings(alone) == [
        "`gpu-only` met the SLO (p99 TTFT ≤ 2000 ms for 0.9 of requests) up to 8 sessions."
    ]


def test_the_search_table_lists_probes_by_value_and_why_it_stopped() -> None:
    t = search_table(parse_summary(SUMMARY).experiments["cap"].servers)
    assert t is not None and t.header[:3] == ["server", "knob", "best"]
    gpu = t.texts()[0]
    assert gpu[:4] == ["gpu-only", "sessions", "8", "ttft_ms"]
    assert gpu[4] == "2: pass, 4: pass, 8: pass, 16: over, 12: over" and gpu[5] == "over the SLO at 9"


def test_the_interval_table_puts_the_ci_beside_min_max_in_every_format() -> None:
    t = interval_table(parse_summary(SUMMARY).points)
    assert t is not None and t.header == ["server", "point", "seeds", "TTFT p50 ms", "hit rate"]
    assert t.texts()[0] == [
        "gpu-only",
        "sessions=8",
        "3",
        "1100 [1000–1200] (CI 900–1300)",
        "50.0% (CI 50.0%–50.0%)",
    ]
    md = markdown.render(SUMMARY)
    assert "### Capacity: the largest load that met the SLO" in md
    assert "| gpu-only | sessions=8 | 3 | 1100 [1000–1200] (CI 900–1300) |" in md
    assert md.index("`hicache` took 6 more sessions") < md.index(
        "### Capacity"
    )  # the finding opens the experiment
    page = render_page(SUMMARY)
    assert "1100 [1000–1200] (CI 900–1300)" in page and "16: saturated" in page


def test_a_sims_goodput_on_the_modelled_clock_is_its_own_column() -> None:
    """Wall clock 100% on a paced sim, card clock 0.5: both tables show the modelled figure, labelled."""
    pt = _point("gpu-only", 8, [1.0, 1.1, 1.2])
    pt["median"] |= {"goodput": {"fraction": 1.0}, "modelled": {"goodput": {"fraction": 0.5}}}
    pt["spread"] |= {"goodput": {"fraction": [1.0, 1.0]}, "modelled": {"goodput": {"fraction": [0.4, 0.6]}}}
    pt["interval"] = {"goodput.fraction": [1.0, 1.0], "modelled.goodput.fraction": [0.25, 0.75]}
    t = interval_table(parse_summary({**SUMMARY, "points": [pt]}).points)
    assert t is not None and t.header[-2:] == ["goodput", "modelled goodput"]
    assert t.texts()[0][-2:] == ["1.000 (CI 1.000–1.000)", "0.500 [0.400–0.600] (CI 0.250–0.750)"]
    from harness.report.latency import latency_table

    lines = latency_table([pt])
    cols = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = dict(zip(cols, (c.strip() for c in lines[2].strip("|").split("|")), strict=True))
    assert (cells["goodput"], cells["modelled goodput"]) == ("100.0", "50.0 (40.0–60.0)")
    assert "modelled goodput" not in latency_table(SUMMARY["points"])[0]  # not a sim: no such column


def test_no_search_and_one_seed_add_nothing() -> None:
    plain = {**SUMMARY, "experiments": {"cap": {"servers": {"gpu-only": {}}}}}
    one = [{**p, "interval": {}} for p in SUMMARY["points"]]
    assert search_table(parse_summary(plain).experiments["cap"].servers) is None
    assert interval_table(parse_summary({**plain, "points": one}).points) is None
    assert "### Capacity" not in markdown.render({**plain, "points": one})
