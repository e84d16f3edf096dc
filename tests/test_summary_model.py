"""The summary's types: a schema-1 file reads and writes back unchanged, bad input is one line, the doc is current."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.summary import SCHEMA_VERSION, Summary, load_summary, parse_summary
from harness.verdicts import stored_verdict, validate_summary

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "docs" / "sample" / "cpu-sim.json"


def _raw() -> dict[str, Any]:
    return json.loads(SAMPLE.read_text(encoding="utf-8"))


def test_the_schema_1_sample_reads_and_writes_back_byte_for_byte() -> None:
    raw = _raw()
    assert raw["schema_version"] == 1  # the committed sample predates the types: it is the v1 fixture
    out = parse_summary(raw).to_json()
    assert json.dumps(out, indent=2) == json.dumps(raw, indent=2)  # same keys, same order, same numbers


def test_regenerated_through_the_types_only_the_version_and_the_verdict_differ() -> None:
    raw = _raw()
    s = load_summary(SAMPLE)
    verdict = stored_verdict(s)
    s.schema_version = SCHEMA_VERSION
    out = s.to_json()
    assert set(out) - set(raw) == {"verdict"} and set(raw) - set(out) == set()
    changed = sorted(k for k in raw if out[k] != raw[k])
    assert changed == ["schema_version"] and out["schema_version"] == SCHEMA_VERSION == 2
    # the stored line is the one validate gives the file
    assert verdict.line == validate_summary(raw)["line"] and out["verdict"]["line"] == verdict.line
    again = parse_summary(out)  # and the written schema 2 reads back to the same
    assert again.to_json() == out and again.verdict == verdict


def test_typed_fields_read_as_their_types() -> None:
    s = load_summary(SAMPLE)
    p = s.points[0]
    assert isinstance(p.median.hit_rate_usage, float) and p.median.latency is not None
    assert p.median.latency.ttft_s.p50 == p.median["latency"]["ttft_s"]["p50"]  # the by-key shim agrees
    assert p.verdict is not None and p.verdict.verdict == "no-telemetry" and p.verdict.flagged is False
    seed = next(iter(p.seeds.values()))
    assert seed.cache is not None and seed.cache.state == "cold" and seed.cache.first_requests is not None
    assert isinstance(seed.figures.requests, int)  # a seed's count stays an int; the median's is a float
    assert isinstance(p.median.requests, float)
    assert "errors" not in p.median and p.median.get("errors") is None  # never written: absent, not null


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s["points"][1]["verdict"].update(flagged="no"), "points[1].verdict.flagged"),
        (lambda s: s["points"][0]["median"].update(hit_rate_usage="0.9"), "points[0].median.hit_rate_usage"),
        (lambda s: s["pairs"][0].pop("verdict"), "pairs[0].verdict: Field required"),
        (lambda s: s.update(problems=[{"path": 3, "reason": "x"}]), "problems[0].path"),
        (lambda s: s.update(schema_version=3), "schema_version 3 is not supported"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(change: Any, message: str) -> None:
    raw = _raw()
    change(raw)
    with pytest.raises(HarnessError) as e:
        parse_summary(raw, "s.json")
    text = str(e.value)
    assert text.startswith("s.json: ") and message in text and "\n" not in text, text


def test_unknown_keys_survive_a_read_and_write() -> None:
    raw = _raw()
    raw["points"][0]["median"]["a_future_figure"] = {"x": 1}
    raw["real_server"] = {"checks": []}
    out = Summary.model_validate(raw).to_json()
    assert out["points"][0]["median"]["a_future_figure"] == {"x": 1} and out["real_server"] == {"checks": []}


def _summary_doc() -> Any:
    """scripts/summary_doc.py as a module (in-process: `make check` runs this test)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import summary_doc
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return summary_doc


def test_docs_summary_md_is_generated_from_the_types() -> None:
    """Fails when the committed docs/summary.md and the types disagree: run scripts/summary_doc.py."""
    doc = (ROOT / "docs" / "summary.md").read_text(encoding="utf-8")
    assert doc == _summary_doc().render(), "docs/summary.md is stale: run scripts/summary_doc.py"
    for cls in ("Summary", "Point", "Seed", "Figures", "ClockVerdict", "CacheJudgement", "Pair"):
        assert f"## {cls}\n" in doc


def test_the_drift_check_fails_when_the_doc_differs(tmp_path: Path, monkeypatch: Any) -> None:
    summary_doc = _summary_doc()
    stale = tmp_path / "summary.md"
    stale.write_text(summary_doc.render().replace("| `point_key` |", "| `point_name` |"), encoding="utf-8")
    monkeypatch.setattr(summary_doc, "DOC", stale)
    assert summary_doc.main(["--check"]) == 1
    stale.write_text(summary_doc.render(), encoding="utf-8")
    assert summary_doc.main(["--check"]) == 0
