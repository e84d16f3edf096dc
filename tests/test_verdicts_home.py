"""Verdicts have one home (issue 25): harness/verdicts judges, summarize stores, capture and report do not judge.

Read from the source with `ast` (nothing imported), so these run in `make check`.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from harness.capture.records import PointRecord

PKG = Path(__file__).resolve().parents[1] / "harness"
# record raw facts only; sweep/bench.py's run_stages is the pipeline after the sweep, not capture
CAPTURE_STAGE = ("capture", "loadgen", "client", "sweep/point.py")
JUDGES = ("point_verdict", "pair_verdicts", "cache_state", "verdict_line", "short_reason", "first_requests")


def _imported(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def _calls(path: Path) -> set[str]:
    """Names of the functions a module calls (`f(...)`, `mod.f(...)`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    funcs = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call)]
    return {f.id for f in funcs if isinstance(f, ast.Name)} | {
        f.attr for f in funcs if isinstance(f, ast.Attribute)
    }


def test_the_capture_stage_imports_neither_summarize_nor_verdicts() -> None:
    bad = {
        f"{p.relative_to(PKG.parent)}: {m}"
        for pkg in CAPTURE_STAGE
        for p in ((PKG / pkg).rglob("*.py") if (PKG / pkg).is_dir() else [PKG / pkg])
        for m in _imported(p)
        if m.startswith(("harness.summarize", "harness.verdicts"))
    }
    assert bad == set(), sorted(bad)


def test_point_json_records_no_judgement() -> None:
    names = {f.name for f in dataclasses.fields(PointRecord)}
    assert {"flushed", "flush_note", "fresh_server"} <= names  # the raw facts the summary judges from
    assert not names & {"cache_state", "cache_flags"}


def test_the_report_renders_stored_verdicts_and_never_judges() -> None:
    for p in (PKG / "report").rglob("*.py"):
        used = _calls(p)
        assert "validate_summary" not in used, f"{p}: the report renders the summary's stored verdicts"
        assert not used & {"point_verdict", "pair_verdicts", "cache_state"}, p


def test_every_judgement_is_defined_in_harness_verdicts_only() -> None:
    defined = {
        (str(p.relative_to(PKG.parent)), n.name)
        for p in PKG.rglob("*.py")
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(n, ast.FunctionDef) and n.name in JUDGES
    }
    assert {name for _, name in defined} == set(JUDGES)
    assert all(path.startswith("harness/verdicts/") for path, _ in defined), sorted(defined)


def test_the_scanners_see_what_they_look_for(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from harness.summarize.summary import x\nimport harness.verdicts\nvalidate_summary(1)\n")
    assert {"harness.summarize.summary", "harness.verdicts"} <= _imported(f)
    assert "validate_summary" in _calls(f)
