"""`harness fleet` on a real Ray cluster of three nodes on this machine (run by tests/fleet/test_cluster.py inside
`unshare -n`): custom resources stand in for card types (the head offers card_h200, two workers card_l4),
the servers are the sim, the suite is smoke. In order: a run in which the l4 unit's node is killed once
its first point is back; a second run that sends nothing; a third after one point is removed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
if not os.environ.get("HARNESS_FLEET_NETNS"):
    pytest.skip("run by tests/fleet/test_cluster.py inside unshare -n", allow_module_level=True)

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from harness.cli import main  # noqa: E402

SMOKE = Path(__file__).resolve().parents[2] / "workloads" / "smoke-bench.yaml"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, list[Any]]]:
    t0 = time.monotonic()
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"card_h200": 1}, "include_dashboard": False},
    )
    workers = [c.add_node(num_cpus=1, resources={"card_l4": 1}) for _ in range(2)]
    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
    c.wait_for_nodes()
    print(f"\nray cluster: 3 nodes up in {time.monotonic() - t0:.1f}s at {c.address}")
    yield c, workers
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory, cluster: tuple[Cluster, list[Any]]) -> Path:
    d = tmp_path_factory.mktemp("fleet")
    (d / "fleet.yaml").write_text(
        f"""
ray_address: {cluster[0].address}
capture: {d / "capture"}
summaries: {d / "summaries"}
stream_every_s: 0.5
node_wait_s: 30
nodes:
  - name: l4
    resources: {{card_l4: 1}}
    gpus: 0
    specs: [{SMOKE}]
    servers: [default]
    server_kind: sim
    bench_args: [--card-profile, l4, --time-scale, "1"]
  - name: h200
    resources: {{card_h200: 1}}
    gpus: 0
    suite: smoke
    server_kind: sim
    bench_args: [--card-profile, h200]
""",
        encoding="utf-8",
    )
    return d


def _fleet(work: Path) -> tuple[int, str, dict[str, Any]]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["fleet", str(work / "fleet.yaml")])
    rec = json.loads((work / "summaries" / "fleet.json").read_text())
    print(buf.getvalue())
    print(f"fleet.json: wall {rec['wall_s']}s (units {rec['units_s']}s)")
    for u in rec["units"]:
        print(f"  {u['node']}/{u['server']}: {u['status']} {u['points_ok']}/{u['points_total']}")
        for a in u["attempts"]:
            sums = " ".join(c[:8] for c in a["checksums"])
            print(
                f"    attempt {a['n']} node {str(a['node_id'])[:8]}: {a['batches']} batches, {a['bytes']} bytes, "
                f"{a['files_written']} file writes, {a['seconds']:.1f}s, exit {a['exit_code']}, "
                f"error {(a['error'] or '-')[:60]}; sha256 {sums}"
            )
    return rc, buf.getvalue(), rec


def _points(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("point.json"))}


def _records(pdir: Path) -> set[bytes]:
    """Every record line of a point folder: this attempt's and those moved aside."""
    return {ln for f in pdir.glob("requests*.jsonl") for ln in f.read_bytes().splitlines() if ln}


def test_node_killed_mid_unit_nothing_lost(work: Path, cluster: tuple[Cluster, list[Any]]) -> None:
    c, workers = cluster
    cap = work / "capture"
    first = cap / "l4" / "smoke-bench" / "default" / "groups=2,seed=0"
    second = cap / "l4" / "smoke-bench" / "default" / "groups=4,seed=0"
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(zip(("rc", "out", "rec"), _fleet(work), strict=True)))
    t0 = time.monotonic()
    t.start()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # the first point of the l4 unit back on the driver: kill its node
        point = json.loads((first / "point.json").read_text()) if (first / "point.json").is_file() else {}
        if point.get("status") == "ok":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the l4 unit's first point never came back")
    while time.monotonic() < deadline:  # and some records of the second point, which is still running
        if (second / "point.json").is_file():
            pytest.fail(
                "the second point ended before any of its records came back: the kill would not be mid-unit"
            )
        if (second / "requests.jsonl").is_file() and (second / "requests.jsonl").read_bytes().count(
            b"\n"
        ) >= 2:
            break
        time.sleep(0.05)
    log = (cap / "l4" / "fleet-logs" / "default.log").read_text()
    node_id = log.split("(node ", 1)[1].split(",", 1)[0]
    victim = next(w for w in workers if w.node_id == node_id)
    kept_first = {f.name: f.read_bytes() for f in first.iterdir()}
    kept_second = _records(second) if second.is_dir() else set()
    manifest = json.loads((cap / "l4" / "smoke-bench" / "manifest.json").read_text())
    sim_pid = manifest["servers"]["default"]["last_pid"]
    c.remove_node(victim, allow_graceful=False)
    print(
        f"killed node {node_id[:12]} at {time.monotonic() - t0:.1f}s; {len(kept_second)} records of the second point were back"
    )
    t.join(300)
    assert not t.is_alive()
    assert result["rc"] == 0, result["out"][-3000:]
    units = {f"{u['node']}/{u['server']}": u for u in result["rec"]["units"]}
    assert set(units) == {"l4/default", "h200/default", "h200/hicache"}
    assert all(u["status"] == "ok" and u["points_ok"] == u["points_total"] == 2 for u in units.values())
    l4 = units["l4/default"]["attempts"]
    assert len(l4) == 2 and l4[0]["node_id"] == node_id and l4[1]["node_id"] != node_id
    assert l4[0]["exit_code"] is None and l4[0]["error"], l4[0]
    assert l4[1]["exit_code"] == 0 and len(l4[1]["checksums"]) == l4[1]["batches"] > 0
    # nothing that reached the driver was lost; the first point was not run again
    for name, data in kept_first.items():
        if name.endswith((".jsonl", ".log")):
            assert (first / name).read_bytes().startswith(data), name
        else:
            assert (first / name).read_bytes() == data, name
    assert json.loads((first / "point.json").read_text())["attempt"] == 1
    assert len(kept_second) >= 2 and kept_second <= _records(second)
    assert (second / "requests.attempt-1.jsonl").is_file()  # the lost attempt's records, kept aside
    assert "1 runs already ok" in (cap / "l4" / "fleet-logs" / "default.log").read_text()
    assert not list(cap.rglob("*.conflict-*"))
    with pytest.raises(ProcessLookupError):  # the lost node's sim server died with its bench
        os.kill(sim_pid, 0)
    # per-node summaries came back complete, and the nodes are compared
    summaries = work / "summaries"
    for node, n in (("l4", 2), ("h200", 4)):
        s = json.loads((summaries / f"{node}.json").read_text())
        assert len(s["points"]) == n and all(p["status"] == "ok" for p in s["points"]), node
    compared = (summaries / "fleet-compare.txt").read_text()
    assert "(node h200)" in compared and re.search(r"default\s+groups=4\s", compared), compared
    assert (summaries / "fleet-compare.html").is_file()


def test_second_run_sends_nothing(work: Path) -> None:
    before = _points(work / "capture")
    rc, out, rec = _fleet(work)
    assert rc == 0
    assert [u["status"] for u in rec["units"]] == ["complete-before"] * 3
    assert all(u["attempts"] == [] for u in rec["units"])
    assert _points(work / "capture") == before
    assert out.count("already ok in") == 3


def test_run_after_a_lost_point_runs_only_that_point(work: Path) -> None:
    cap = work / "capture" / "h200" / "smoke-bench" / "hicache"
    keep = (cap / "groups=2,seed=0" / "point.json").read_bytes()
    others = {k: v for k, v in _points(work / "capture").items() if "h200/smoke-bench/hicache" not in k}
    for f in (cap / "groups=4,seed=0").iterdir():
        f.unlink()
    (cap / "groups=4,seed=0").rmdir()
    rc, out, rec = _fleet(work)
    assert rc == 0
    status = {f"{u['node']}/{u['server']}": u for u in rec["units"]}
    assert status["h200/hicache"]["status"] == "ok" and len(status["h200/hicache"]["attempts"]) == 1
    assert status["l4/default"]["status"] == status["h200/default"]["status"] == "complete-before"
    assert (cap / "groups=2,seed=0" / "point.json").read_bytes() == keep
    assert json.loads((cap / "groups=4,seed=0" / "point.json").read_text())["status"] == "ok"
    assert {
        k: v for k, v in _points(work / "capture").items() if "h200/smoke-bench/hicache" not in k
    } == others
    assert "1 runs already ok" in (work / "capture" / "h200" / "fleet-logs" / "hicache.log").read_text()


def test_units_that_cannot_run_fail_with_their_reason(
    tmp_path: Path, cluster: tuple[Cluster, list[Any]]
) -> None:
    (tmp_path / "fleet.yaml").write_text(
        f"""
ray_address: {cluster[0].address}
capture: {tmp_path / "capture"}
summaries: {tmp_path / "summaries"}
node_wait_s: 1
nodes:
  - {{name: gb10, resources: {{card_gb10: 1}}, gpus: 0, suite: smoke, servers: [default], server_kind: sim}}
  - name: h200
    resources: {{card_h200: 1}}
    gpus: 0
    suite: smoke
    servers: [default]
    server_kind: sim
    bench_args: [--retries, "-1"]
""",
        encoding="utf-8",
    )
    rc, out, rec = _fleet(tmp_path)
    assert rc == 1
    units = {u["node"]: u for u in rec["units"]}
    assert units["gb10"]["status"] == "failed" and units["gb10"]["attempts"] == []
    assert units["gb10"]["reason"] == "no alive Ray node offers {card_gb10: 1, CPU: 1} (waited 1s)"
    assert (
        units["h200"]["status"] == "failed" and len(units["h200"]["attempts"]) == 1
    )  # bad input: not retried
    assert (
        units["h200"]["reason"]
        == "harness bench exit 2: harness bench: error: --retries: expected 0 or more, got -1"
    )
    assert "fleet: 0/2 units ok" in out
