"""The report's traffic tables: per priority class and per prompt-length bucket, servers side by side;
end to end on the sim, a tlru sweep over threshold and next_prompt_estimate beside lru."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.report.classes import traffic_tables
from tests.helpers.cli import run_bench
from tests.helpers.specs import SIM_FAST, TIMEOUTS, multi_turn, spec, write_yaml


def point(server: str, **median: Any) -> dict[str, Any]:
    return {"experiment": "e", "server": server, "point_key": "default", "median": median}


def test_rows_per_key_then_server() -> None:
    pts = [
        point("tlru", hit_rate_usage_by_length={"256": 0.5, "1024": 0.25}, ttft_p99_s_by_length={"1024": 0.3},
              requests_by_length={"256": 4, "1024": 2}),
        point("lru", hit_rate_usage_by_length={"256": 0.4, "1024": 0.1}, ttft_p99_s_by_length={"1024": 0.9},
              requests_by_length={"256": 4, "1024": 2}),
    ]  # fmt: skip
    (t,) = traffic_tables(pts)
    assert t.kind == "lengths" and t.header[:3] == ["prompt tokens", "server", "point"]
    assert t.texts() == [
        ["256–511", "lru", "default", "4", "40.0", "n/a", "n/a"],
        ["256–511", "tlru", "default", "4", "50.0", "n/a", "n/a"],
        ["1024–2047", "lru", "default", "2", "10.0", "n/a", "900.0"],
        ["1024–2047", "tlru", "default", "2", "25.0", "n/a", "300.0"],
    ]


def test_classes_table_only_with_classes() -> None:
    assert traffic_tables([point("lru")]) == []
    (t,) = traffic_tables(
        [point("p", hit_rate_usage_by_class={"low": 0.1, "high": 0.9}, requests_by_class={"high": 3})]
    )
    assert [r[0] for r in t.texts()] == ["high", "low"] and t.texts()[0][3:5] == ["3", "90.0"]


def test_an_agent_workload_by_step_depth_and_context_length() -> None:
    agent = {
        **point("lru", hit_rate_usage_by_step_depth={"10": 0.75, "2": 0.5}, requests_by_step_depth={"2": 3},
                hit_rate_usage_by_length={"256": 0.5, "512": 0.7}),
        "workload_kind": "agent",
    }  # fmt: skip
    depth, length = traffic_tables([agent])
    assert (
        depth.kind == "depths" and depth.header[0] == "step depth" and depth.title.startswith("By step depth")
    )
    assert [r[:5] for r in depth.texts()] == [
        ["2", "lru", "default", "3", "50.0"],
        ["10", "lru", "default", "n/a", "75.0"],
    ]
    assert length.header[0] == "context tokens" and length.title == "By context length (tokens)"
    (chat,) = traffic_tables(
        [{**agent, "workload_kind": "multi-turn", "median": {"hit_rate_usage_by_length": {"1": 0.1}}}]
    )
    assert chat.header[0] == "prompt tokens"


@pytest.mark.slow
def test_a_tlru_sweep_reports_p99_ttft_by_length_beside_lru(tmp_path: Path) -> None:
    cfg = '{"threshold": {threshold}, "next_prompt_estimate": {estimate}}'
    base = [*SIM_FAST, "--max-total-tokens", "1500", "--enable-cache-report"]
    servers = [
        {"name": "lru", "launch": "sim", "args": [*base, "--radix-eviction-policy", "lru"]},
        {"name": "tlru-{threshold}-{estimate}", "launch": "sim",
         "args": [*base, "--radix-eviction-policy", "tlru", "--radix-eviction-policy-config", cfg]},
    ]  # fmt: skip
    wl = multi_turn(sessions=6, turns=4, system_prompt_tokens=100, question_tokens=40, answer_tokens=16)
    raw = spec("tlru", wl, concurrency=2, seeds=[0], timeouts=TIMEOUTS, servers=servers,
               matrix={"threshold": [128, 256], "estimate": [64]})  # fmt: skip
    r = run_bench(tmp_path, "--spec", str(write_yaml(tmp_path / "tlru.yaml", raw)), timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    points = json.loads((tmp_path / "summaries" / "n.json").read_text())["points"]
    p99 = {p["server"]: p["median"]["ttft_p99_s_by_length"] for p in points}
    assert set(p99) == {"lru", "tlru-128-64", "tlru-256-64"}
    assert len({tuple(sorted(v)) for v in p99.values()}) == 1 and len(p99["lru"]) >= 2  # the same buckets
    assert all(isinstance(x, float) and x > 0 for v in p99.values() for x in v.values())
    md = (tmp_path / "summaries" / "n.md").read_text()
    table = md.split("### By prompt length (tokens)")[1].split("###")[0]
    for server in p99:
        assert f"| {server} | default |" in table
