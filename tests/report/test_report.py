"""Report Markdown and PNG charts from a hand-built capture; compare; bad inputs give one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.report import common, markdown
from harness.summarize import summary
from tests.helpers.summary_capture import T0, build, prefill


@pytest.fixture(scope="module")
def summary_file(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("rep")
    build(tmp / "capture")
    out = tmp / "summaries" / "l4.json"
    summary.write_summaries(summary.summarize([tmp / "capture"]), out)
    return out


def test_markdown_tables_and_pngs(summary_file: Path, tmp_path: Path) -> None:
    assert main(["report", str(summary_file), "-o", str(tmp_path)]) == 0
    md = (tmp_path / "l4.md").read_text()
    # A/B table of the shared-prefix experiment
    assert "| groups | prompt tokens to keep | median TTFT ms (gpu / hicache) |" in md
    assert "| 4 | 320 | 300 / 100 (partial) |" in md  # gpu 0.30 s, hicache's ok seed 0.10 s
    assert "hicache: partial: 1/2 seeds ok, median over those" in md
    assert "125 / 500 (missing)" in md
    # policy table of the multi-turn experiment, hit rate per turn
    assert "| pool (tokens) | policy | server | whole-run hit rate | turn 1 | turn 2 | turn 3 |" in md
    assert "| 2048 | lru | lru | 50.0% | 0.0% | 50.0% | 66.7% |" in md
    assert "| 2048 | lfu | lfu | 63.3% | 0.0% | 50.0% | 93.3% |" in md
    # evidence quoted verbatim, sources side by side with the disagreement flagged
    assert prefill(T0 + 2, 20, 80) in md
    assert "| server | point | usage % | server timings % | log % | counters % | block (tokens) |" in md
    # the fixture's group 1 opens with 40 of 100 tokens cached: more than one page, so not a cold cache
    assert (
        "| gpu | groups=4 | 58.8% [50.0%–67.5%] | n/a | 58.8% | 50.0% | n/a | 8.75 | disagree, cache-not-cold | ok |"
        in md
    )
    assert (
        "- ⚠ cache-not-cold: gpu groups=4: seed 0: 1 of 2 groups/sessions found more than 16 tokens cached"
        in md
    )
    assert "requests.jsonl`: 1 unreadable lines skipped" in md
    pngs = sorted(tmp_path.glob("*.png"))
    assert [p.name for p in pngs] == ["l4-gsp-sm-clock.png", "l4-gsp-ttft.png", "l4-mt-hit-rate-per-turn.png"]
    import matplotlib.image as mpimg

    for p in pngs:
        assert p.stat().st_size > 10_000
        img = mpimg.imread(p)
        assert img.shape[0] >= 400 and img.shape[1] >= 700  # 7 x 4.2 in at 110 dpi
        assert f"]({p.name})" in md


def test_layout_from_data(summary_file: Path) -> None:
    s = common.load_summary(summary_file)
    gsp = [p for p in s["points"] if p["experiment"] == "gsp"]
    mt = [p for p in s["points"] if p["experiment"] == "mt"]
    assert markdown.layout(gsp) == "ab" and markdown.layout(mt) == "policy"
    other = [{**p, "sweep": {"concurrency": 4}, "workload_kind": None} for p in gsp]
    assert markdown.layout(other) == "generic"
    assert "| server | point | requests |" in "\n".join(markdown.generic_table(other))


def test_not_a_summary_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}))
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a summary" in err[0] and "bad.json" in err[0]
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1, "poi')
    assert main(["report", str(broken)]) == 2
    assert main(["compare", str(broken), str(bad)]) == 2
    assert main(["report", str(tmp_path / "absent.json")]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_compare_ratios(summary_file: Path, tmp_path: Path, capsys) -> None:
    s = json.loads(summary_file.read_text())
    for p in s["points"]:
        if p["median"].get("ttft_median_s"):
            p["median"]["ttft_median_s"] *= 2
            if "latency.ttft_s.p50" in p.get("interval", {}):  # B's TTFT interval wholly above A's
                p["interval"]["latency.ttft_s.p50"] = [p["interval"]["latency.ttft_s.p50"][1] + 1] * 2
    other = tmp_path / "b.json"
    other.write_text(json.dumps(s))
    assert main(["compare", str(summary_file), str(other), "--figures", "ttft_median_s,output_tok_s"]) == 0
    out = capsys.readouterr().out
    # output tok/s: the same seeds on both sides, so the intervals overlap: ≈ (no difference to state);
    # hicache's partial point has fewer than two ok seeds: no interval, no mark
    assert [line.split() for line in out.splitlines() if "groups=4" in line] == [
        ["gpu", "groups=4", "2.00×", "1.00×", "≈"],
        ["hicache", "groups=4", "(partial/partial)", "2.00×", "1.00×"],
    ]
    # the legend says what no mark means: a difference outside the intervals, or no interval at all
    assert "no mark: they do not, or a side has no interval (one ok seed)" in " ".join(out.split())
    assert main(["compare", str(summary_file), str(other), "--figures", "ttft_median_s,itl_median_s"]) == 0
    assert "(one ok seed; none for ITL p50)" in " ".join(capsys.readouterr().out.split())


def test_compare_defaults_include_the_hit_rate_typos_exit_2_numeric_order(
    summary_file: Path, tmp_path: Path, capsys
) -> None:
    s = json.loads(summary_file.read_text())
    base = next(p for p in s["points"] if p["sweep"].get("groups") == 4 and p["server"] == "gpu")
    for g in (16, 64, 32):  # extra sweep values, stored out of order
        q = json.loads(json.dumps(base))
        q["sweep"] = {"groups": g}
        q["point_key"] = f"groups={g}"
        s["points"].append(q)
    a = tmp_path / "a.json"
    a.write_text(json.dumps(s))
    for p in s["points"]:
        if p["median"].get("hit_rate_usage") is not None:
            p["median"]["hit_rate_usage"] = 0.5
    b = tmp_path / "b.json"
    b.write_text(json.dumps(s))
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "hit rate" in out and "58.8→50.0%" in out
    gpu = [line.split()[1] for line in out.splitlines() if line.split()[:1] == ["gpu"]]
    groups = [int(g.removeprefix("groups=")) for g in gpu]
    assert groups == sorted(groups) and {4, 16, 32, 64} <= set(groups)  # 4 before 16, as numbers
    assert main(["compare", str(a), str(b), "--figures", "hitrate"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown figure 'hitrate'" in err
    # a figure not in the list but held by the summaries' medians is accepted
    assert main(["compare", str(a), str(b), "--figures", "prompt_tokens"]) == 0


def test_sim_modelled_columns_come_from_the_modelled_block_never_wall_over_scale() -> None:
    """A sim point's modelled TTFT and tok/s are the summary's `modelled` block (the sim's virtual
    clock), not its wall-clock TTFT ÷ --time-scale; the note says what the scale did."""
    servers = {
        "sim": {"args": ["--time-scale", "0.05"], "server_info": {"card": {"name": "l4-8b"}}},
        "real": {"args": ["--max-total-tokens", "2048"], "server_info": {"version": "0.5.23"}},
    }
    entry = {
        "servers": {
            n: {**e, "time_scale": summary._time_scale(None, e["args"], None, n, {})}
            for n, e in servers.items()
        }
    }
    assert entry["servers"]["sim"]["time_scale"] == 0.05 and entry["servers"]["real"]["time_scale"] is None
    modelled = {
        "ttft_ms": {"p50": 363.0, "p90": 700.0, "p99": 900.0},
        "tpot_ms": {"p50": 30.0, "p90": 31.0, "p99": 32.0},
        "output_tok_s": 250.0,
        "source": "sim virtual clock (request stamps)",
        "wall_overhead_max": 0.4,
        "notes": ["serve-sim warned 2 time(s) that wall-clock overhead passed 5% of the modelled step time"],
    }
    points = [
        {
            "experiment": "ab",
            "server": name,
            "point_key": "groups=4",
            "sweep": {"groups": 4},
            "status": "ok",
            "median": {"ttft_median_s": ttft, "output_tok_s": 10.0},
            "modelled": modelled if name == "sim" else None,
        }
        for name, ttft in (("sim", 0.040), ("real", 0.500))
    ]
    md = markdown.render({"schema_version": 2, "node": "n", "points": points, "experiments": {"ab": entry}})
    head = "| median TTFT ms (real / sim) | modelled median TTFT ms, l4-8b (real / sim) | output tok/s (real / sim) "
    assert head + "| modelled output tok/s, l4-8b (real / sim) |" in md
    assert "| 500 / 40 | n/a / 363 | 10.0 / 10.0 | n/a / 250.0 |" in md  # not 40 ms ÷ 0.05 = 800
    assert (
        "_Sim server sim: modelled columns are the modelled l4-8b card's time from the sim's own clock "
        "(sim virtual clock (request stamps)); --time-scale 0.05 only paced the run (20x faster than the card)"
        in md
    )
    assert "_On 1 of 1 sim points serve-sim warned that its wall-clock overhead passed 5% of the" in md
    assert "(up to 40%)" in md
    assert "real:" not in md.split("_Sim server")[1].split("\n")[0]


def test_time_scale_sources_in_order() -> None:
    ts = summary._time_scale
    assert ts({"time_scale": 0.1}, ["--time-scale", "0.5"], None, "s", {}) == 0.1  # server_info first
    assert ts(None, ["--time-scale=0.25"], None, "s", {}) == 0.25
    manifest = {"bench": {"time_scale": 0.05}, "servers": {"s": {"launch": "sim"}, "g": {"launch": "sglang"}}}
    assert ts(None, [], manifest["servers"], "s", manifest) == 0.05  # the bench's scale for a sim launch
    assert ts(None, [], manifest["servers"], "g", manifest) is None  # a real server runs at card time
    assert ts({"time_scale": "fast"}, None, None, "s", {}) is None


def test_points_are_ordered_by_sweep_value_numerically():
    from harness.report.common import as_points, point_order

    raw = [
        {"experiment": "e", "server": "a", "sweep": {"groups": g}, "point_key": f"groups={g}"}
        for g in (16, 4, 64, 32)
    ]
    assert [p.sweep["groups"] for p in sorted(as_points(raw), key=point_order)] == [4, 16, 32, 64]


def test_verdict_cells_carry_their_short_reason(summary_file: Path) -> None:
    s = json.loads(summary_file.read_text())
    md = markdown.render(s)
    # the fixture's sim points have no GPU: the cell says so beside the word, the JSON keeps the long form
    assert "no-telemetry (sim: no GPU)" in md
    assert "| verdict |" in md
    # the report opens with the verdict line validate and bench end with
    from harness.verdicts import validate_summary

    assert f"**Verdicts:** {validate_summary(s)['line']}." in md
    v = {"verdict": "below-floor", "reasons": ["busy-median SM clock 700 MHz < floor 1316 MHz (...)"]}
    tel = {"busy_median_sm_clock_mhz": 700.0}
    assert common.verdict_cell(v, tel) == "below-floor (SM 700 MHz < floor)"
    assert (
        common.verdict_cell(v, tel, {"cache_state": "warm-start"})
        == "below-floor (SM 700 MHz < floor, warm-start)"
    )


def test_a_real_server_without_a_policy_is_not_shown_as_lru() -> None:
    llama = {"args": ["-m", "tiny.gguf", "--cache-reuse", "256"], "server_info": {"engine": "llama.cpp"}}
    assert common.server_policy(llama) == "n/a"
    sglang = {"args": ["--max-total-tokens", "8192"], "server_info": {}}
    assert common.server_policy(sglang) == "lru"  # SGLang's default
    assert (
        common.server_policy({"args": ["-m", "sglang.launch_server"]}) == "lru"
    )  # a word of its launch line
    assert common.server_policy({"args": {"mem-fraction-static": 0.8}}) == "lru"  # args as an object
    assert (
        common.server_policy({"server_info": {"chunked_prefill_size": 512}}) == "lru"
    )  # its server_info keys
    assert common.server_policy({"args": ["--model", "m", "--max-model-len=4096"]}) == "n/a"  # vLLM's
    assert common.server_policy({"args": ["--radix-eviction-policy", "slru"]}) == "slru"
    assert common.server_policy({"server_info": {"radix_eviction_policy": "lfu"}}) == "lfu"


def test_generic_table_shows_modelled_columns_for_sim_points() -> None:
    """A layout without groups or turns (e.g. a trace) still shows a sim point's modelled figures."""
    point = {
        "experiment": "t",
        "server": "sim",
        "point_key": "concurrency=8",
        "sweep": {"concurrency": 8},
        "status": "ok",
        "median": {"ttft_median_s": 0.007, "output_tok_s": 1500.0, "requests": 600, "failures": 0},
        "modelled": {
            "ttft_ms": {"p50": 235.0},
            "output_tok_s": 44.0,
            "source": "sim virtual clock (request stamps)",
        },
    }
    md = markdown.render(
        {"schema_version": 2, "node": "n", "points": [point], "experiments": {"t": {"servers": {}}}}
    )
    # sim points alone: the modelled card's time leads and the sim's wall clock is not beside it
    assert "| requests | failures | modelled median TTFT ms | modelled output tok/s | hit rate |" in md
    assert "| 600 | 0 | 235 | 44.0 | n/a |" in md
    plain = markdown.render(
        {"schema_version": 2, "node": "n", "points": [{**point, "modelled": None}], "experiments": {"t": {}}}
    )
    table = plain.split("## t")[1].split("| server")[1].split("\n")[0]
    assert "modelled" not in table and "| TTFT median ms | TTFT p99 ms | output tok/s |" in table
