"""The report's tool-gap section: a row per point x gap bucket with tier shares, "-" for a server without a
tier split, nothing at all for points without a table (every workload but agentic traces)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.report.html_page import table_html
from harness.report.tool_gap import tool_gap_chart, tool_gap_html, tool_gap_lines, tool_gap_table


def _point(server: str, tool_gap: dict[str, Any] | None) -> dict[str, Any]:
    p: dict[str, Any] = {"experiment": "e", "server": server, "point_key": "default"}
    return {**p, "tool_gap": tool_gap} if tool_gap is not None else p


def _gap(split: bool) -> dict[str, Any]:
    tiers = {"device_tokens": 60, "host_tokens": 30, "storage_tokens": 0} if split else {}
    return {
        "requests": 3,
        "speedup": 200,
        "gap_p50_s": 2.0,
        "gap_p95_s": 90.0,
        "gap_p99_s": 100.0,
        "split": split,
        "source": "usage",
        "rows": [
            {
                "gap_lo_s": 0,
                "gap_hi_s": 1,
                "requests": 2,
                "prompt_tokens": 100,
                "cached_tokens": 90,
                "recomputed_tokens": 10,
                **tiers,
            },
            {
                "gap_lo_s": 128,
                "gap_hi_s": None,
                "requests": 1,
                "prompt_tokens": 100,
                "cached_tokens": 90,
                "recomputed_tokens": 10,
                **tiers,
            },
        ],
    }


def test_table_rows_and_shares(tmp_path: Path) -> None:
    pts = [_point("hicache", _gap(True)), _point("plain", _gap(False)), _point("other", None)]
    t = tool_gap_table(pts)
    assert t is not None and t.kind == "tool-gap"
    assert t.texts() == [
        ["hicache", "default", "0–1", "2", "60.0%", "30.0%", "0.0%", "10.0%"],
        ["hicache", "default", "≥ 128", "1", "60.0%", "30.0%", "0.0%", "10.0%"],
        ["plain", "default", "0–1", "2", "-", "-", "-", "10.0%"],
        ["plain", "default", "≥ 128", "1", "-", "-", "-", "10.0%"],
    ]
    lines = tool_gap_lines(pts)
    assert lines[1] == "### What a tool gap costs" and "speedup 200" in lines[3] and "p95 90 s" in lines[3]
    assert tool_gap_chart(pts, tmp_path / "g.png", "t") == tmp_path / "g.png"
    assert (tmp_path / "g.png").stat().st_size > 1000
    assert 'data-table="tool-gap"' in tool_gap_html(pts, "t", table_html)


def test_points_without_a_table_add_nothing(tmp_path: Path) -> None:
    pts = [_point("other", None)]
    assert (
        tool_gap_table(pts) is None
        and tool_gap_lines(pts) == []
        and tool_gap_html(pts, "t", table_html) == ""
    )
    assert tool_gap_chart(pts, tmp_path / "g.png", "t") is None and not (tmp_path / "g.png").exists()
