"""The miss anatomy in the report (harness.report.anatomy): the dominant class and its lever open an
experiment's findings, per eviction or routing policy, and one stacked bar per point is drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.report.anatomy import anatomy_chart, anatomy_findings, anatomy_img
from harness.report.findings import experiment_findings
from harness.summary import Point, Server


def _point(server: str, hit: int, evicted: int, elsewhere: int = 0, lever: float | None = None) -> Point:
    a: dict[str, Any] = {"prompt_tokens": 1000, "hit": hit, "first_seen": 100, "evicted": evicted,
                         "elsewhere": elsewhere, "in_flight": 1000 - hit - 100 - evicted - elsewhere}  # fmt: skip
    if lever is not None:
        a["lever"] = {
            "change": "a host tier of 2x the pool",
            "held_share": lever,
            "hit_rate": 0.8,
            "base_hit_rate": 0.4,
        }
    return Point.model_validate(
        {"experiment": "e", "server": server, "point_key": "default", "median": {"miss_anatomy": a, "hit_rate_usage": hit / 1000}}
    )  # fmt: skip


def test_the_dominant_class_and_its_replayed_lever_open_the_findings() -> None:
    pts = [_point("lru-8192", 400, 480, lever=0.8), _point("lru-16384", 880, 0)]
    srv = {"lru-8192": Server(args=["--radix-eviction-policy", "lru"]), "lru-16384": Server()}
    got = anatomy_findings(pts, srv)
    assert got[0].startswith("67% of the misses were evicted prefixes")  # 480 of 600 + 120
    assert "a host tier of 2x the pool would have held 80% of them" in got[0]
    assert "48% of its prompt tokens evicted" in got[1] and "2% of its prompt tokens in flight" in got[1]
    assert experiment_findings(pts, srv)[: len(got)] == got


def test_routing_policies_name_what_routing_lost() -> None:
    pts = [_point("rr", 500, 100, elsewhere=300), _point("ca", 800, 50, elsewhere=20)]
    srv = {
        n: Server(replicas={"policy": p, "replicas": 2})
        for n, p in (("rr", "round_robin"), ("ca", "cache_aware"))
    }
    got = anatomy_findings(pts, srv)
    assert "held by another worker" in got[0] and "cache_aware" in got[0]
    assert "round_robin x2 30% of its prompt tokens held elsewhere" in got[1]
    assert "cache_aware x2 5% of its prompt tokens evicted, 2% held elsewhere" in got[1]


def test_no_anatomy_no_sentence_and_a_bar_per_point(tmp_path: Path) -> None:
    bare = Point.model_validate({"experiment": "e", "server": "s", "median": {}})
    assert anatomy_findings([bare], {}) == []
    assert anatomy_chart([bare], tmp_path / "none.png", "t") is None
    out = anatomy_chart([_point("a", 400, 480), _point("b", 880, 0)], tmp_path / "a.png", "t")
    assert out is not None and out.read_bytes()[:4] == b"\x89PNG"
    assert anatomy_img([_point("a", 400, 480)], "t").startswith('<figure class="anatomy"><img')
