"""The HTML page and the CSVs from a hand-built capture and from the sample suite; the page in a real
(headless) chromium with no network: tables hold every point with its numbers, charts drew their series,
nothing left the page. Browser tests are `slow`; without chromium they skip locally and fail under CI."""

from __future__ import annotations

import json
import os
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.cli import main
from harness.report import csv_files as report_csv
from harness.report import html_compare
from harness.report import html_page as report_html
from harness.report.common import load_summary
from harness.summarize import summary as summarize
from harness.summary import Point
from tests.helpers.browser import Chromium, PageResult, can_unshare_net, ensure_chromium
from tests.helpers.summary_capture import build

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "docs" / "sample" / "cpu-sim.json"
MAX_PAGE_BYTES = 5 * 1024 * 1024
BROWSER_TIMEOUT_S = 1500  # the first browser test may install chromium with apt-get on a cold machine


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("html")
    build(tmp / "capture")
    out = tmp / "summaries" / "l4.json"
    summarize.write_summaries(summarize.summarize([tmp / "capture"]), out)
    return load_summary(out).to_json()


@pytest.fixture(scope="module")
def sample() -> dict[str, Any]:
    return load_summary(SAMPLE).to_json()


# ---------------------------------------------------------------- the page as a file


class _Refs(HTMLParser):
    """Every URL-bearing attribute and every <script src>/<link>: an offline page has none."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.csp: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for k in ("src", "href", "action", "data", "poster", "srcset"):
            v = a.get(k)
            if v is not None and not v.startswith("#"):
                self.refs.append(f"{tag}.{k}={v}")
        if tag == "link":
            self.refs.append(f"link {a}")
        if tag == "meta" and (a.get("http-equiv") or "").lower() == "content-security-policy":
            self.csp = a.get("content")


def test_page_is_self_contained_and_small(summary: dict[str, Any], tmp_path: Path) -> None:
    page = report_html.write_html(summary, tmp_path / "l4.html").read_text()
    refs = _Refs()
    refs.feed(page)
    assert refs.refs == []  # only in-page anchors: no script, style, font or image from anywhere
    assert refs.csp is not None and "default-src 'none'" in refs.csp and "connect-src 'none'" in refs.csp
    assert "uPlot" in page and "sourceMappingURL" not in page
    assert len(page.encode()) < MAX_PAGE_BYTES
    # every point of every experiment has a row in its main table
    for p in summary["points"]:
        key = p["point_key"] if p["experiment"] == "gsp" else f"{p['server']}|{p['point_key']}"
        assert f'data-point="{key}"' in page


def test_text_is_escaped_and_secrets_redacted(summary: dict[str, Any], tmp_path: Path) -> None:
    s = json.loads(json.dumps(summary))
    s["experiments"]["gsp"]["manifest"]["servers"]["gpu"]["argv"] = [
        "python",
        "-m",
        "sglang.launch_server",
        "--api-key",
        "sk-verysecret123",
    ]
    s["experiments"]["gsp"]["manifest"]["servers"]["gpu"]["env"] = {"HF_TOKEN": "hf_abcdefgh123"}
    s["notes"] = ["</script><script>alert(1)</script>"]
    for p in s["points"]:
        p["evidence"] = ["<b>bold</b> & </script>"]
    page = report_html.render(s)
    assert "sk-verysecret123" not in page and "hf_abcdefgh123" not in page
    assert "--api-key &#x27;&lt;redacted&gt;&#x27;" in page  # shlex-quoted, then HTML-escaped
    assert "<script>alert(1)" not in page and "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;/script&gt;" in page
    # the chart data block cannot be closed early by text inside it
    block = page.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    json.loads(block)


def test_header_facts_name_node_card_driver_versions_and_time_scale(sample: dict[str, Any]) -> None:
    facts = dict(report_html.header_facts(sample))
    assert facts["node"] == "cpu-sim"
    # the modelled card as the sim reported it in server_info (name, GPU, model)
    cards = {
        srv["server_info"]["card"]["name"]
        for e in sample["experiments"].values()
        for srv in e["servers"].values()
        if (srv.get("server_info") or {}).get("card")
    }
    assert cards and all(f"sim, modelled {c} (NVIDIA L4" in facts["card"] for c in cards), facts["card"]
    assert facts["driver"].startswith("n/a (no NVML")
    shas = {m["manifest"]["git_sha"] for m in sample["experiments"].values()}
    assert all(sha in facts["git sha"] for sha in shas)
    scales = sorted(
        {
            a[a.index("--time-scale") + 1]
            for e in sample["experiments"].values()
            for srv in e["servers"].values()
            if "--time-scale" in (a := srv.get("args") or [])
        },
        key=float,
    )
    assert scales and all(f"{x} (" in facts["time scale (sim)"] for x in scales), facts["time scale (sim)"]
    assert facts["time scale (sim)"].startswith(scales[0])
    lines = dict(report_html.launch_lines(sample))
    assert "--time-scale 0.02" in lines["working-set/hicache"]


# ---------------------------------------------------------------- CSV


def test_csv_one_row_per_seed_plus_median_read_by_pandas(summary: dict[str, Any], tmp_path: Path) -> None:
    paths = report_csv.write_csvs(summary, tmp_path, stem="l4")
    assert [p.name for p in paths] == ["l4-gsp.csv", "l4-mt.csv"]
    for path in paths:
        df = pd.read_csv(path)
        exp = path.stem.split("-", 1)[1]
        pts = [p for p in summary["points"] if p["experiment"] == exp]
        assert len(df) == sum(len(p["seeds"]) + 1 for p in pts)
        for p in pts:
            mine = df[(df["server"] == p["server"]) & (df["point_key"] == p["point_key"])]
            med = mine[mine["row"] == "median"]
            assert len(med) == 1 and med["status"].iloc[0] == p["status"]
            for fig in ("ttft_median_s", "hit_rate_usage", "output_tok_s"):
                want = p["median"].get(fig)
                got = med[fig].iloc[0]
                assert (pd.isna(got) and want is None) or got == pytest.approx(want)
            seeds = mine[mine["row"] == "seed"]
            assert sorted(seeds["seed"].astype(int)) == sorted(int(s) for s in p["seeds"])
            for _, r in seeds.iterrows():
                figs = p["seeds"][str(int(r["seed"]))].get("figures") or {}
                want = figs.get("ttft_median_s")
                assert (pd.isna(r["ttft_median_s"]) and want is None) or r["ttft_median_s"] == pytest.approx(
                    want
                )
    mt = pd.read_csv(tmp_path / "l4-mt.csv")
    lfu = mt[(mt["server"] == "lfu") & (mt["row"] == "median")].iloc[0]
    assert lfu["policy"] == "lfu" and lfu["hit_rate_usage_by_turn.2"] == pytest.approx(
        next(p for p in summary["points"] if p["server"] == "lfu")["median"]["hit_rate_usage_by_turn"]["2"]
    )


# ---------------------------------------------------------------- in a real browser


@pytest.fixture(scope="module")
def browser():
    binary, why = ensure_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail(f"browser tests need chromium under CI: {why}")
        pytest.skip(f"chromium cannot be had here: {why}")
    b = Chromium(binary, no_network=can_unshare_net())
    yield b
    b.close()


def _ms(v: Any) -> str:
    return f"{v * 1000:.0f}" if isinstance(v, int | float) else "n/a"


def _pct(v: Any) -> str:
    return f"{v * 100:.1f}%" if isinstance(v, int | float) else "n/a"


def _fmt(v: float) -> str:
    """The page's number format: 0 decimals from 100, 1 from 10, else 2."""
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def _legend_value(median_s: float, spread_s: list[float]) -> str:
    text = _fmt(median_s * 1000)
    lo, hi = _fmt(spread_s[0] * 1000), _fmt(spread_s[1] * 1000)
    return text + (f" [{lo}–{hi}]" if lo != hi else "")


def _tables(res: PageResult, exp: str, kind: str) -> list[dict[str, Any]]:
    return [t for t in res.dom["tables"] if t["experiment"] == exp and t["table"] == kind]


def _col(t: dict[str, Any], prefix: str) -> int:
    return next(i for i, h in enumerate(t["header"]) if h.startswith(prefix))


def check_page(res: PageResult, summary: dict[str, Any]) -> None:
    """Every number below is worked out from the summary here, not taken from the page's own code."""
    # the page itself and its inline images (data: URIs, e.g. the miss anatomy): nothing leaves the file
    outside = [r for r in res.requests if r != res.url and not r.startswith("data:")]
    assert outside == [] and res.url in res.requests, f"requests left the page: {res.requests}"
    assert res.errors == [], res.errors
    dom = res.dom
    assert dom["scrollWidth"] <= 1366  # fits a laptop screen: no page-wide horizontal scroll
    for exp in summary["experiments"]:
        pts = [p for p in summary["points"] if p["experiment"] == exp]
        servers = sorted({p["server"] for p in pts})
        by_turn = any(
            p["workload_kind"] == "multi-turn" or len(p["median"].get("hit_rate_usage_by_turn") or {}) > 1
            for p in pts
        )
        if not by_turn and not any("groups" in p["sweep"] for p in pts):  # e.g. a trace: one row a point
            (t,) = _tables(res, exp, "generic")
            col = _col(t, "hit rate")
            rows = {r["point"]: r["cells"] for r in t["rows"]}
            assert set(rows) == {f"{p['server']}|{p['point_key']}" for p in pts}
            for p in pts:
                assert rows[f"{p['server']}|{p['point_key']}"][col].startswith(
                    _pct(p["median"]["hit_rate_usage"])
                )
        elif not by_turn:
            (t,) = _tables(res, exp, "ab")
            sims = all(
                p.get("modelled") for p in pts
            )  # sims alone: the modelled card's time, no wall beside it
            assert sims != any(h.startswith("median TTFT ms") for h in t["header"])
            col = _col(t, "modelled median TTFT ms" if sims else "median TTFT ms")
            assert {r["point"] for r in t["rows"]} == {p["point_key"] for p in pts}
            for r in t["rows"]:
                cells = r["cells"][col].split(" / ")
                for p in (p for p in pts if p["point_key"] == r["point"]):
                    want = (
                        f"{p['modelled']['ttft_ms']['p50']:.0f}"
                        if sims
                        else _ms(p["median"]["ttft_median_s"])
                    )
                    assert cells[servers.index(p["server"])].startswith(want)
        else:
            (t,) = _tables(res, exp, "policy")
            col = _col(t, "whole-run hit rate")
            rows = {r["point"]: r["cells"] for r in t["rows"]}
            assert set(rows) == {f"{p['server']}|{p['point_key']}" for p in pts}
            for p in pts:
                cells = rows[f"{p['server']}|{p['point_key']}"]
                assert cells[col].startswith(_pct(p["median"]["hit_rate_usage"]))
                for turn, v in p["median"]["hit_rate_usage_by_turn"].items():
                    assert cells[_col(t, f"turn {int(turn) + 1}")] == _pct(v)
        (src,) = _tables(res, exp, "sources")
        rows = {r["point"]: r["cells"] for r in src["rows"]}
        assert set(rows) == {f"{p['server']}|{p['point_key']}" for p in pts}
        for p in pts:
            cells = rows[f"{p['server']}|{p['point_key']}"]
            assert cells[_col(src, "usage")].startswith(_pct(p["median"].get("hit_rate_usage")))
            assert cells[_col(src, "counters")] == _pct(p["median"].get("hit_rate_counters"))
        (lat,) = _tables(res, exp, "latency")
        col = _col(lat, "TTFT p99 ms")
        for r in lat["rows"]:
            p = next(p for p in pts if f"{p['server']}|{p['point_key']}" == r["point"])
            v = p["median"].get("ttft_p99_s")
            assert r["cells"][col].startswith(f"{v * 1000:.1f}" if v is not None else "n/a")
        pairs = [pr for pr in summary.get("pairs") or [] if pr["experiment"] == exp]
        assert len(sum((t["rows"] for t in _tables(res, exp, "pairs")), [])) == len(pairs)
        # charts: one series per server (TTFT), per point (hit rate, SM clock), each painted
        charts = {c["kind"]: c for c in dom["charts"] if c["experiment"] == exp}
        if any("groups" in p["sweep"] for p in pts):
            assert len(charts["ttft"]["legend"]) == len(
                {p["server"] for p in pts if p["median"].get("ttft_median_s") is not None}
            )
        by = "hit-rate-turn" if "hit-rate-turn" in charts else "hit-rate-position"
        fig = "hit_rate_usage_by_" + by.rsplit("-", 1)[1]
        assert len(charts[by]["legend"]) == sum(1 for p in pts if p["median"].get(fig))
        with_clock = [p for p in pts if p.get("clock_series")]
        assert len(charts.get("sm-clock", {}).get("legend", [])) == len(with_clock)
        for c in charts.values():
            assert c["error"] is None and len(c["legend"]) == c["expected"]
            assert c["canvas"]["w"] >= 320 and c["canvas"]["painted"] > 2000, c
    # verdict badges carry their reasons on hover
    reasons = {r for p in summary["points"] for r in (p.get("verdict") or {}).get("reasons", [])}
    titles = " ".join(b["title"] or "" for b in dom["badges"])
    assert dom["badges"] and all(r in titles for r in reasons)
    # the server's own prefill lines, verbatim
    # keyed by experiment too: two experiments may name a server and a point alike (gpu-only, default)
    shown = {(e["experiment"], e["point"]): e["text"] for e in dom["evidence"]}
    for p in summary["points"]:
        if p.get("evidence"):
            key = (p["experiment"], f"{p['server']}|{p['point_key']}")
            assert shown[key] == "\n".join(p["evidence"]), key
    assert res.pdf.startswith(b"%PDF") and len(res.pdf) > 20_000  # printable
    assert res.screenshot.startswith(b"\x89PNG")


@pytest.mark.slow
@pytest.mark.timeout(BROWSER_TIMEOUT_S)
def test_page_in_chromium_hand_built(browser: Chromium, summary: dict[str, Any], tmp_path: Path) -> None:
    s = _with_modelled(summary)
    path = report_html.write_html(s, tmp_path / "l4.html")
    res = browser.load(path)
    check_page(res, s)
    assert int(res.dom["drawn"]) == len(res.dom["charts"]) >= 5
    (modelled,) = [c for c in res.dom["charts"] if c["kind"] == "ttft-modelled"]
    assert [x.split("—")[0] for x in modelled["legend"]] == ["gpu", "hicache"]
    (tmp_path / "l4.png").write_bytes(res.screenshot)


@pytest.mark.slow
@pytest.mark.timeout(BROWSER_TIMEOUT_S)
def test_sample_suite_page_in_chromium(browser: Chromium, sample: dict[str, Any], tmp_path: Path) -> None:
    """The default suite's page: weight, render time (printed), and the screenshot the README shows."""
    t0 = time.perf_counter()
    path = report_html.write_html(sample, tmp_path / "cpu-sim.html")
    write_s = time.perf_counter() - t0
    ttft = '#exp-working-set figure.chart[data-kind="ttft"]'
    res = browser.load(
        path,
        shot_at='#exp-working-set table[data-table="ab"]',
        hover=(f"{ttft} .u-over", 0.5, 0.5),
        click=f"{ttft} .u-legend tr.u-series:nth-child(3) th",
    )
    check_page(res, sample)
    # hovering reads each server's median TTFT with its seed spread at the point under the cursor
    pts = [p for p in sample["points"] if p["experiment"] == "working-set"]
    servers = sorted({p["server"] for p in pts})
    hovered = [h["value"] for h in res.dom["hover"]]
    wanted = {
        g: [
            _legend_value(p["median"]["ttft_median_s"], p["spread"]["ttft_median_s"])
            for p in sorted(
                (p for p in pts if p["sweep"]["groups"] == g), key=lambda p: servers.index(p["server"])
            )
        ]
        for g in {p["sweep"]["groups"] for p in pts}
    }
    assert hovered in wanted.values(), (hovered, wanted)
    # a click on the second legend entry hides that series (uPlot marks it off) and the chart redraws
    # with the other one; fewer pixels is not a rule: the y range re-fits to what is left
    assert res.dom["after_click"]["off"] == [False, True]
    assert res.dom["after_click"]["painted"] > 2000
    size = path.stat().st_size
    assert size < MAX_PAGE_BYTES
    print(
        f"\ndefault suite page: {size / 1024:.0f} KiB, written in {write_s * 1000:.0f} ms, rendered in "
        f"{res.render_s * 1000:.0f} ms (navigate → charts drawn), PDF {len(res.pdf) / 1024:.0f} KiB"
    )
    (tmp_path / "cpu-sim-html.png").write_bytes(res.screenshot)
    if os.environ.get("HARNESS_UPDATE_DOCS"):  # refresh the README's screenshot and sample page
        (ROOT / "docs" / "sample" / "cpu-sim-html.png").write_bytes(res.screenshot)
        (ROOT / "docs" / "sample" / "cpu-sim.html").write_text(path.read_text())
    assert re.search(rb"IHDR\x00\x00\x05V\x00\x00\x03\x84", res.screenshot)  # 1366 x 900


def test_compare_reading_says_clock_cache_or_card(summary: dict[str, Any]) -> None:
    p = next(p for p in summary["points"] if p["server"] == "gpu" and p["point_key"] == "groups=4")
    ok = {**p, "verdict": {"verdict": "ok", "reasons": [], "flagged": False}}
    hot = {**p, "verdict": {"verdict": "thermal", "reasons": ["thermal 40 %"], "flagged": True}}
    colder = {**ok, "median": {**p["median"], "hit_rate_usage": p["median"]["hit_rate_usage"] - 0.1}}
    p, ok, hot, colder = (Point.model_validate(x) for x in (p, ok, hot, colder))
    assert html_compare.reading([("a", ok), ("b", hot)], 2.0).startswith("clock: b: thermal")
    assert html_compare.reading([("a", ok), ("b", colder)], 2.0) == "cache: hit rate differs by 10.0 points"
    assert html_compare.reading([("a", ok), ("b", ok)], 0.5) == (
        "same hit rate, clocks steady: the difference is the card or server"
    )
    assert html_compare.reading([("a", ok), ("b", p)], 1.02).startswith("alike")
    assert html_compare.reading([("a", ok)], None) == "run on one node only"


@pytest.mark.slow
@pytest.mark.timeout(BROWSER_TIMEOUT_S)
def test_compare_page_in_chromium(browser: Chromium, summary: dict[str, Any], tmp_path: Path) -> None:
    """Two nodes side by side: every point of either node in the table, one chart series per node."""
    other = json.loads(json.dumps(summary))
    other["node"] = "gb10"
    for p in other["points"]:
        if p["median"].get("ttft_median_s"):
            p["median"]["ttft_median_s"] *= 0.5
    other["points"] = [p for p in other["points"] if p["server"] != "lru"]  # mt/lru not run on gb10
    nodes = [("l4", summary), ("gb10", other)]
    path = html_compare.write_compare_html(nodes, tmp_path / "cmp.html")
    res = browser.load(path)
    assert res.requests == [res.url] and res.errors == []
    for exp in summary["experiments"]:
        (t,) = _tables(res, exp, "compare")
        rows = {r["point"]: r["cells"] for r in t["rows"]}
        want = {
            f"{p['server']}|{p['point_key']}" for _, s in nodes for p in s["points"] if p["experiment"] == exp
        }
        assert set(rows) == want
        for label, s in nodes:
            col = _col(t, f"{label}: TTFT median ms")
            for p in (p for p in s["points"] if p["experiment"] == exp):
                assert rows[f"{p['server']}|{p['point_key']}"][col].startswith(
                    _ms(p["median"]["ttft_median_s"])
                )
        if exp == "mt":
            assert rows["lru|default"][_col(t, "gb10: TTFT median ms")] == "not run"
        charts = {c["kind"]: c for c in res.dom["charts"] if c["experiment"] == exp}
        if exp == "gsp":
            assert charts["ttft"]["legend"][0].startswith("l4 · gpu")
            assert len(charts["ttft"]["legend"]) == 4  # gpu, hicache on each node
        else:
            assert len(charts["hit-rate-turn"]["legend"]) == 3  # l4: lfu, lru; gb10: lfu
        for c in charts.values():
            assert c["error"] is None and c["canvas"]["painted"] > 2000
        details = [t for t in res.dom["tables"] if t["experiment"] == exp and t["node"]]
        assert {t["node"] for t in details} == {"l4", "gb10"}


def test_report_command_writes_page_and_csvs_beside_the_markdown(
    summary: dict[str, Any], tmp_path: Path
) -> None:
    src = tmp_path / "l4.json"
    src.write_text(json.dumps(summary))
    assert main(["report", str(src), "--no-charts"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "l4-gsp.csv",
        "l4-mt.csv",
        "l4.html",
        "l4.json",
        "l4.md",
    ]
    assert 'data-table="ab"' in (tmp_path / "l4.html").read_text()
    out = tmp_path / "only-md"
    assert main(["report", str(src), "-o", str(out), "--no-charts", "--no-html", "--no-csv"]) == 0
    assert [p.name for p in out.iterdir()] == ["l4.md"]


def test_compare_command_html(summary: dict[str, Any], tmp_path: Path, capsys) -> None:
    a, b, c = tmp_path / "l4.json", tmp_path / "gb10.json", tmp_path / "h200.json"
    a.write_text(json.dumps(summary))
    b.write_text(json.dumps({**summary, "node": "gb10"}))
    c.write_text(json.dumps({**summary, "node": "h200"}))
    out = tmp_path / "cmp" / "nodes.html"
    assert main(["compare", str(a), str(b), str(c), "--html", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("ratio = B / A") == 2 and str(out) in text
    page = out.read_text()
    assert "l4 vs gb10 vs h200" in page
    for n in ("l4", "gb10", "h200"):
        assert f"<th>{n}: TTFT median ms</th>" in page and f'data-node="{n}"' in page
    # two summaries of one node are told apart by their file names
    same = tmp_path / "l4-again.json"
    same.write_text(json.dumps(summary))
    assert main(["compare", str(a), str(same), "--html", str(out)]) == 0
    assert "l4 vs l4-again" in out.read_text()


def _with_modelled(summary: dict[str, Any]) -> dict[str, Any]:
    """The hand-built summary as if the gsp servers were sims: per-seed and median modelled TTFT."""
    s = json.loads(json.dumps(summary))
    for p in s["points"]:
        if p["experiment"] != "gsp":
            continue
        for i, (_seed, sd) in enumerate(sorted(p["seeds"].items())):
            sd.setdefault("figures", {})["modelled"] = {
                "ttft_ms": {"p50": 100.0 + 10 * i},
                "output_tok_s": 5.0,
            }
        p["modelled"] = {"ttft_ms": {"p50": 105.0, "p90": 120.0}, "output_tok_s": 5.0, "source": "test"}
    return s


def test_modelled_ttft_chart_and_csv_columns(summary: dict[str, Any], tmp_path: Path) -> None:
    from harness.report.chart_data import experiment_charts

    s = _with_modelled(summary)
    gsp = [p for p in s["points"] if p["experiment"] == "gsp"]
    charts = {c["kind"]: c for c in experiment_charts("gsp", [("l4", gsp)])}
    ch = charts["ttft-modelled"]
    assert ch["x"] == [1.0, 4.0] and [x["label"] for x in ch["series"]] == ["gpu", "hicache"]
    gpu = ch["series"][0]
    assert gpu["y"] == [105.0, 105.0]
    # groups=4 has two ok seeds (100, 110 ms); groups=1 one seed (100 ms)
    assert gpu["lo"] == [100.0, 100.0] and gpu["hi"] == [100.0, 110.0]
    assert "ttft-modelled" not in {
        c["kind"]
        for c in experiment_charts(
            "gsp", [("l4", [p for p in summary["points"] if p["experiment"] == "gsp"])]
        )
    }
    (path,) = [p for p in report_csv.write_csvs(s, tmp_path, "l4") if p.name == "l4-gsp.csv"]
    df = pd.read_csv(path)
    med = df[(df["row"] == "median") & (df["server"] == "gpu") & (df["point_key"] == "groups=4")].iloc[0]
    assert med["modelled.ttft_ms.p50"] == 105.0 and med["modelled.ttft_ms.p90"] == 120.0
    seeds = df[(df["row"] == "seed") & (df["server"] == "gpu") & (df["point_key"] == "groups=4")]
    assert sorted(seeds["modelled.ttft_ms.p50"]) == [100.0, 110.0]


def test_without_chromium_the_reason_is_one_line(monkeypatch) -> None:
    """No chromium and no way to install it: (None, why) — the browser tests skip (fail under CI) with it."""
    from tests.helpers import browser as b

    monkeypatch.setattr(b.shutil, "which", lambda name: None)
    monkeypatch.setattr(b.os, "geteuid", lambda: 1000)
    binary, why = b.ensure_chromium()
    assert binary is None and "\n" not in why and "chromium is not installed" in why
