"""A re-run point keeps the earlier attempt's records and /metrics timeline aside under one attempt number."""

from __future__ import annotations

from pathlib import Path

from harness.capture.points import move_aside


def test_records_and_timeline_move_aside_together_and_number_on(tmp_path: Path) -> None:
    (tmp_path / "requests.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "metrics.jsonl").write_text('{"kind": "header"}\n')
    (tmp_path / "point.json").write_text("{}")
    move_aside(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "metrics.attempt-1.jsonl",
        "requests.attempt-1.jsonl",
    ]
    (tmp_path / "metrics.jsonl").write_text('{"kind": "header", "n": 2}\n')  # a run that sent nothing
    move_aside(tmp_path)
    assert (tmp_path / "metrics.attempt-2.jsonl").read_text() == '{"kind": "header", "n": 2}\n'
    assert (tmp_path / "requests.attempt-1.jsonl").read_text() == '{"a": 1}\n'
    assert not (tmp_path / "requests.attempt-2.jsonl").exists()
