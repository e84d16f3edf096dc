"""`harness whatif` on a bailian session trace, offline as on a Mooncake file: the file's own 16-token
blocks, sessions and turns from its parent links; per priority class when a spec over the file draws
classes the file does not carry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.whatif.grid import Config
from harness.whatif.inputs import read_input
from harness.whatif.replay import replay
from tests.helpers.cli import harness
from tests.helpers.specs import spec, write_yaml

DATA = Path(__file__).resolve().parents[1] / "data" / "bailian" / "sessions.jsonl"


def test_a_bailian_file_replays_with_its_own_blocks_and_sessions() -> None:
    trace = read_input(DATA)
    assert trace.kind == "blocks" and trace.unit == 16 and trace.concurrency is None
    reqs = trace.requests
    assert [r.index for r in reqs] == list(range(6))  # recorded time order (here the file's)
    assert [(r.session, r.turn) for r in reqs] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (0, 2)]
    assert [r.arrival for r in reqs] == [0.0, 0.5, 1.0, 2.0, 3.0, 5.0]  # seconds, not Mooncake's ms
    assert [r.gap for r in reqs] == [0.0, 0.0, 0.0, 2.0, 2.5, 3.0]
    res = replay(trace, Config(policy="lru", pool=100))
    hits = {t: h for t, (h, _ideal, _p) in res.per_turn.items()}
    # block-exact, counted in whole 16-token blocks: turn 1 of session 1 finds blocks 1, 2 (32); turn 2 of
    # session 0 blocks 1-3 and of session 1 blocks 1, 2, 30 (48 + 48); turn 3 blocks 1, 2, 3, 10, 11 (80)
    assert hits == {0: 32, 1: 48 + 48, 2: 80}


def test_a_spec_over_the_file_gives_per_class_figures(tmp_path: Path) -> None:
    classes = [{"name": "high", "share": 1, "value": 10}, {"name": "low", "share": 1, "value": 0}]
    wl = {"kind": "trace", "format": "bailian", "path": str(DATA), "speedup": 10}
    path = write_yaml(
        tmp_path / "b.yaml", spec("b", wl, api="openai-completions", concurrency=2, priorities=classes)
    )
    trace = read_input(path)
    assert {r.priority_class for r in trace.requests} == {"high", "low"}
    res = replay(trace, Config(policy="priority", pool=100), card="tiny-test")
    assert set(res.per_class) == {"high", "low"} and set(res.ttft_ms_by_class) == {"high", "low"}
    assert sum(p for _h, _i, p in res.per_class.values()) == sum(r.tokens for r in trace.requests)


@pytest.mark.slow
def test_whatif_prints_per_class_for_a_spec_over_a_bailian_file(tmp_path: Path) -> None:
    classes = [{"name": "high", "share": 1, "value": 10}, {"name": "low", "share": 1, "value": 0}]
    wl = {"kind": "trace", "format": "bailian", "path": str(DATA), "speedup": 10}
    path = write_yaml(
        tmp_path / "b.yaml", spec("b", wl, api="openai-completions", concurrency=2, priorities=classes)
    )
    r = harness("whatif", str(path), "--policy", "lru,priority", "--pool", "100")
    assert r.returncode == 0, r.stderr
    assert "per priority class" in r.stdout and "high" in r.stdout and "low" in r.stdout


def test_a_bad_bailian_line_is_one_error(tmp_path: Path) -> None:
    good = json.loads(DATA.read_text().splitlines()[0])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n" + json.dumps({**good, "hash_ids": [1]}) + "\n")
    with pytest.raises(HarnessError) as e:
        read_input(bad)
    assert str(e.value) == f"{bad}: line 2: hash_ids: 1 ids, but input_length 40 needs 3 (one per 16 tokens)"
