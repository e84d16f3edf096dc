"""docs/architecture.md's module list is the docstrings' (tests/helpers/architecture_doc.py): a module added,
moved or re-described in code and not on the page fails here, so the list cannot fall behind the tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import architecture_doc

ROOT = Path(__file__).resolve().parents[1]


def test_the_module_list_is_generated_from_the_docstrings() -> None:
    doc = architecture_doc.DOC.read_text(encoding="utf-8")
    assert doc == architecture_doc.render(doc), (
        "docs/architecture.md's module list is stale: run .venv/bin/python -m tests.helpers.architecture_doc"
    )
    for path in (ROOT / "harness").rglob("*.py"):  # every module is named, under its package's line
        shown = f"{path.parent.name}/`" if path.name == "__init__.py" else f"`{path.name}`"
        assert shown in doc, path


def test_every_module_says_why_it_exists() -> None:
    assert architecture_doc.missing_docstrings() == []


def test_generated_lines_stay_under_100_characters() -> None:
    assert max(len(line) for line in architecture_doc.module_list().splitlines()) < 100


def test_a_new_module_or_a_changed_docstring_makes_the_page_stale(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""The package. More here."""\n', encoding="utf-8")
    (pkg / "sub" / "__init__.py").write_text('"""A stage."""\n', encoding="utf-8")
    (pkg / "a.py").write_text('"""Why a exists, e.g. for b. Detail."""\n', encoding="utf-8")
    page = tmp_path / "architecture.md"
    page.write_text(f"# T\n\n{architecture_doc.START}\n{architecture_doc.END}\nafter\n", encoding="utf-8")
    fresh = architecture_doc.render(page.read_text(encoding="utf-8"), pkg)
    assert "- `pkg/`: The package.\n  - `a.py`: Why a exists, e.g. for b.\n  - `sub/`: A stage.\n" in fresh
    assert fresh.endswith(f"{architecture_doc.END}\nafter\n")
    page.write_text(fresh, encoding="utf-8")
    (pkg / "sub" / "b.py").write_text("x = 1\n", encoding="utf-8")  # a new module, no docstring
    assert architecture_doc.render(fresh, pkg) != fresh
    assert architecture_doc.missing_docstrings(pkg) == ["pkg/sub/b.py"]
    (pkg / "sub" / "b.py").unlink()
    (pkg / "a.py").write_text('"""Why a exists now."""\n', encoding="utf-8")  # a changed docstring
    assert architecture_doc.render(fresh, pkg) != fresh


def test_check_fails_on_a_stale_page_and_passes_on_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "architecture.md"
    fresh = architecture_doc.render(architecture_doc.DOC.read_text(encoding="utf-8"))
    page.write_text(fresh.replace("- `cli.py`", "- `cli2.py`", 1), encoding="utf-8")
    monkeypatch.setattr(architecture_doc, "DOC", page)
    assert architecture_doc.main(["--check"]) == 1
    page.write_text(fresh, encoding="utf-8")
    assert architecture_doc.main(["--check"]) == 0
