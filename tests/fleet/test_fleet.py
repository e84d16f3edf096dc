"""harness fleet without a cluster: the fleet file's one-line errors, the resume decision, and the
change stream (Tracker → pack → unpack → Merger) replaying what bench does to a capture folder."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import SpecError
from harness.fleet.config import load_fleet
from harness.fleet.merge import Merger
from harness.fleet.sync import Tracker, extract_seed, pack, sha256, unpack
from harness.fleet.units import plan_units

SMOKE = Path(__file__).resolve().parents[2] / "workloads" / "smoke-bench.yaml"


def _fleet(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "fleet.yaml"
    f.write_text(text, encoding="utf-8")
    return f


GOOD = f"""
ray_address: local
capture: {{cap}}
nodes:
  - name: l4
    resources: {{{{"accelerator_type:L4": 1}}}}
    gpus: 1
    suite: smoke
    server_kind: sim
  - name: gb10
    resources: {{{{"accelerator_type:GB10": 1}}}}
    specs: [{SMOKE}]
    servers: [hicache]
"""


def test_fleet_file_parsed(tmp_path: Path) -> None:
    fleet = load_fleet(_fleet(tmp_path, GOOD.format(cap=tmp_path / "cap")))
    assert [g.name for g in fleet.nodes] == ["l4", "gb10"]
    assert fleet.nodes[0].resources == {"accelerator_type:L4": 1.0}
    assert fleet.nodes[0].specs[0].name == "smoke-bench.yaml"
    assert fleet.nodes[1].gpus == 1 and fleet.nodes[1].server_kind == "auto"
    units = plan_units(fleet)
    assert [u.key for u in units] == ["l4/default", "l4/hicache", "gb10/hicache"]
    assert units[0].points == [("smoke-bench", "groups=2,seed=0"), ("smoke-bench", "groups=4,seed=0")]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("nodes: []", "fleet.yaml: nodes: expected a non-empty list of node groups, got []"),
        ("nodez: 1\nnodes: [{name: a}]", "fleet.yaml: nodez: unknown key"),
        ("nodes: [{name: a, gpus: -1}]", "fleet.yaml: nodes[0].gpus: expected a number >= 0, got -1"),
        ("nodes: [{name: 'a b'}]", "fleet.yaml: nodes[0].name: expected a name of letters"),
        ("nodes: [{name: a}, {name: a}]", "fleet.yaml: nodes[1].name: 'a' is already used"),
        (
            "nodes: [{name: a, resources: {x: 0}}]",
            "fleet.yaml: nodes[0].resources.x: expected a positive number",
        ),
        ("nodes: [{name: a, resources: {GPU: 1}}]", "fleet.yaml: nodes[0].resources.GPU: use `gpus:`"),
        ("nodes: [{name: a, suite: nope}]", "fleet.yaml: nodes[0].suite: expected one of default, smoke"),
        ("nodes: [{name: a, specs: [missing.yaml]}]", "fleet.yaml: nodes[0].specs[0]: "),
        (
            "nodes: [{name: a, suite: smoke, specs: [x]}]",
            "fleet.yaml: nodes[0].specs: give either suite or specs",
        ),
        (
            "nodes: [{name: a, server_kind: gpu}]",
            "fleet.yaml: nodes[0].server_kind: expected one of auto, sglang, sglang-cpu, sim, got 'gpu'",
        ),
        (  # a group runs its suites' `launch: sglang` profiles; vLLM would drop their SGLang flags
            "nodes: [{name: a, server_kind: vllm}]",
            "fleet.yaml: nodes[0].server_kind: expected one of auto, sglang, sglang-cpu, sim, got 'vllm'",
        ),
        (
            "nodes: [{name: a, bench_args: [--node, x]}]",
            "fleet.yaml: nodes[0].bench_args: --node is set by the fleet",
        ),
        (
            "nodes: [{name: a, suite: smoke, servers: [nope]}]",
            "fleet.yaml: nodes[0].servers: no server profile",
        ),
        ("retries: -1\nnodes: [{name: a}]", "fleet.yaml: retries: expected an integer >= 0, got -1"),
        ("nodes: [{name: a}", "fleet.yaml: line 1: not valid YAML"),
    ],
)
def test_bad_fleet_file_one_line_exit_2(
    tmp_path: Path,
    body: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = _fleet(tmp_path, body)
    monkeypatch.chdir(tmp_path)
    assert main(["fleet", "fleet.yaml", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(
        f"harness fleet: error: {message}".replace("fleet.yaml", str(Path("fleet.yaml")))
    ), err
    with pytest.raises(SpecError):
        plan_units(load_fleet(f))


def test_without_ray_one_line_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _fleet(tmp_path, GOOD.format(cap=tmp_path / "cap"))
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray → ImportError
    assert main(["fleet", str(f)]) == 2
    assert (
        capsys.readouterr().err
        == "harness fleet: error: harness fleet needs Ray: pip install 'harness[fleet]'\n"
    )


def test_resume_decision_counts_ok_points(tmp_path: Path) -> None:
    cap = tmp_path / "cap"
    unit = plan_units(load_fleet(_fleet(tmp_path, GOOD.format(cap=cap))))[0]
    assert unit.ok_points(cap) == 0 and not unit.complete(cap)
    for i, (exp, p) in enumerate(unit.points):
        d = cap / "l4" / exp / "default" / p
        d.mkdir(parents=True)
        (d / "point.json").write_text(json.dumps({"status": "ok" if i == 0 else "failed"}))
    assert unit.ok_points(cap) == 1 and not unit.complete(cap)
    (d / "point.json").write_text(json.dumps({"status": "ok"}))
    assert unit.complete(cap)
    # the seed holds what the driver has of this unit only
    other = cap / "l4" / "smoke-bench" / "hicache" / "x"
    other.mkdir(parents=True)
    (other / "point.json").write_text("{}")
    remote = tmp_path / "remote"
    assert extract_seed(unit.seed_tar(cap), remote, "l4") == 2
    assert not (remote / "l4" / "smoke-bench" / "hicache").exists()


# ------------------------------------------------------------------ the change stream


def _ship(tracker: Tracker, merger: Merger, final: bool = False) -> int:
    batch = tracker.diff(final)
    data = pack(batch)
    back = unpack(data)
    assert sha256(data) == sha256(pack(back)) or back.ops == batch.ops
    merger.apply(back)
    return len(batch.ops)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_stream_mirrors_bench_including_moves_and_partial_lines(tmp_path: Path) -> None:
    remote, driver = tmp_path / "remote", tmp_path / "driver"
    pdir = remote / "n" / "exp" / "srv" / "g=1,seed=0"
    pdir.mkdir(parents=True)
    tracker = Tracker(remote)
    tracker.prime()
    merger = Merger(driver, "n", "t")
    req = pdir / "requests.jsonl"
    req.write_bytes(b'{"i":0}\n{"i":1}\n{"i":')  # a line being written
    (pdir / "point.json").write_text('{"status": "failed", "attempt": 1}')
    assert _ship(tracker, merger) == 2
    assert (driver / "n/exp/srv/g=1,seed=0/requests.jsonl").read_bytes() == b'{"i":0}\n{"i":1}\n'
    with open(req, "ab") as fh:
        fh.write(b'2}\n{"i":3}\n')
    assert _ship(tracker, merger) == 1  # only the appended bytes
    # bench resumes the failed point: moves the records aside, drops point.json, starts again
    os.replace(req, pdir / "requests.attempt-1.jsonl")
    (pdir / "point.json").unlink()
    req.write_bytes(b'{"j":0}\n')
    _ship(tracker, merger)
    (pdir / "point.json").write_text('{"status": "ok", "attempt": 2}')
    _ship(tracker, merger, final=True)
    assert _tree(driver) == _tree(remote)
    assert not merger.stats.conflicts and not merger.stats.kept
    assert merger.stats.renamed == 1 and merger.stats.deleted == 1


def test_merge_never_trades_more_for_less(tmp_path: Path) -> None:
    remote, driver = tmp_path / "remote", tmp_path / "driver"
    pdir = driver / "n" / "e" / "s" / "p"
    pdir.mkdir(parents=True)
    (pdir / "point.json").write_text('{"status": "ok", "attempt": 1}')
    (pdir / "requests.jsonl").write_bytes(b'{"a":1}\n{"a":2}\n')
    (driver / "n" / "e" / "manifest.json").write_text(json.dumps({"servers": {"s": {"x": 1}}}))
    shutil.copytree(driver, remote)
    tracker = Tracker(remote)
    tracker.prime()
    # a stale remote copy: point.json not ok, records that differ, a manifest that only knows server t
    rp = remote / "n" / "e" / "s" / "p"
    (rp / "point.json").unlink()
    (rp / "point.json").write_text('{"status": "failed"}')
    (rp / "requests.jsonl").unlink()
    (rp / "requests.jsonl").write_bytes(b'{"b":1}\n')
    (remote / "n" / "e" / "manifest.json").unlink()
    (remote / "n" / "e" / "manifest.json").write_text(json.dumps({"servers": {"t": {"y": 2}}}))
    merger = Merger(driver, "n", "t1")
    _ship(tracker, merger, final=True)
    assert json.loads((pdir / "point.json").read_text())["status"] == "ok"
    assert merger.stats.kept == ["n/e/s/p/point.json"]
    assert (pdir / "requests.jsonl").read_bytes() == b'{"a":1}\n{"a":2}\n'
    assert (pdir / "requests.jsonl.conflict-t1").read_bytes() == b'{"b":1}\n'
    assert set(json.loads((driver / "n" / "e" / "manifest.json").read_text())["servers"]) == {"s", "t"}
    # a replayed batch changes nothing
    before = _tree(driver)
    data = pack(tracker.diff(final=True))
    Merger(driver, "n", "t2").apply(unpack(data))
    assert _tree(driver) == before


def test_batch_paths_stay_under_the_node(tmp_path: Path) -> None:
    from harness.fleet.sync import Batch

    bad = Batch([{"op": "write", "path": "n/../../x", "offset": 0, "append": False, "member": "d/0"}], [b"x"])
    with pytest.raises(ValueError, match="outside capture/n"):
        Merger(tmp_path, "n", "t").apply(unpack(pack(bad)))
    other = Batch([{"op": "write", "path": "m/e/f", "offset": 0, "append": False, "member": "d/0"}], [b"x"])
    with pytest.raises(ValueError, match="outside capture/n"):
        Merger(tmp_path, "n", "t").apply(unpack(pack(other)))
    assert not any(tmp_path.rglob("*"))


def test_reused_inode_is_not_taken_for_a_move(tmp_path: Path) -> None:
    """Inode numbers come back after a delete: a new file on a freed inode is new, not the old one moved."""
    remote, driver = tmp_path / "remote", tmp_path / "driver"
    edir = remote / "n" / "e"
    edir.mkdir(parents=True)
    (edir / "manifest.json").write_text('{"servers": {}}')
    (edir / "server.log").write_bytes(b"old line\n")
    tracker = Tracker(remote)
    tracker.prime()
    merger = Merger(driver, "n", "t")
    shutil.copytree(remote, driver, dirs_exist_ok=True)
    (edir / "manifest.json").unlink()
    (edir / "server.log").unlink()
    tel = edir / "s" / "p" / "telemetry.jsonl"
    tel.parent.mkdir(parents=True)
    tel.write_bytes(b'{"kind":"header"}\n')
    (edir / "server.log").write_bytes(b"new line\n")
    ino = tel.stat().st_ino
    tracker.state["n/e/manifest.json"].ino = ino  # as if the kernel handed the freed inodes out again
    tracker.state["n/e/server.log"].ino = (edir / "server.log").stat().st_ino
    batch = tracker.diff(final=True)
    assert not [op for op in batch.ops if op["op"] == "rename"]
    merger.apply(unpack(pack(batch)))
    assert (driver / "n/e/s/p/telemetry.jsonl").read_bytes() == b'{"kind":"header"}\n'
    assert (driver / "n/e/manifest.json").is_file()  # a data file is never deleted on the driver
    assert (driver / "n/e/server.log").read_bytes() == b"old line\n"
    assert (driver / "n/e/server.log.conflict-t").read_bytes() == b"new line\n"


def _probe_ok(cap: Path, value: int) -> None:
    """A search probe's point folder as bench leaves it: point.json ok, its requests well within the SLO."""
    pdir = cap / "l4" / "capacity" / "s" / f"concurrency={value},seed=0"
    pdir.mkdir(parents=True)
    recs = [
        {"ok": True, "ttft_s": 0.1, "e2e_s": 0.2, "completion_tokens": 4, "scheduled_mono": i / value}
        for i in range(8)
    ]
    (pdir / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    point = {"status": "ok", "requests_scheduled": 8, "sweep": {"concurrency": value}, "seed": 0}
    (pdir / "point.json").write_text(json.dumps(point))


def test_a_search_spec_is_one_search_owed_not_a_point_count(tmp_path: Path, capsys) -> None:
    """A `search:` spec's probes are chosen as it goes: the unit owes the search, done when the capture ends it."""
    from harness.fleet.units import progress_text
    from tests.helpers.specs import shared_prefix, write_spec

    spec = write_spec(
        tmp_path,
        "capacity",
        shared_prefix(groups=1, prompts_per_group=8),
        tokenizer="word",
        seeds=[0],
        search={"knob": "concurrency", "lo": 2, "hi": 4, "slo": {"ttft_ms": 1000}},
        servers=[{"name": "s", "launch": "sim"}],
    )
    cap = tmp_path / "cap"
    fleet = f"capture: {cap}\nnodes:\n  - name: l4\n    specs: [{spec}]\n    server_kind: sim\n"
    (unit,) = plan_units(load_fleet(f := _fleet(tmp_path, fleet)))
    assert unit.points == [] and [s.name for s in unit.searches] == ["capacity"]
    assert unit.progress(cap) == "search: 0/1 done" and not unit.complete(cap)
    _probe_ok(cap, 2)  # passed: the search goes on to 4 (hi)
    assert unit.searches_done(cap) == 0 and not unit.complete(cap)
    _probe_ok(cap, 4)  # hi met the target: the search is over
    assert unit.progress(cap) == "search: 1/1 done" and unit.complete(cap)
    assert main(["fleet", str(f), "--dry-run"]) == 0
    assert (
        "unit l4/s: 0 points and 1 searches in 1 specs, 0 already ok, search: 1 done"
        in capsys.readouterr().out
    )
    # what the fleet's closing lines say of a unit holding points, a search, or both
    assert progress_text(3, 4, 0, 0) == "3/4 points ok"
    assert progress_text(2, 2, 1, 2) == "2/2 points ok, search: 1/2 done"
