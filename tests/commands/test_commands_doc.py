"""docs/commands.md is the parsers' own help (tests/helpers/commands_doc.py): a flag added, renamed or
re-documented in code and not on the page fails here, so the reference page cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import COMMANDS
from tests.helpers import commands_doc

ROOT = Path(__file__).resolve().parents[2]


def test_docs_commands_md_is_generated_from_the_parsers() -> None:
    doc = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert doc == commands_doc.render(), (
        "docs/commands.md is stale: run .venv/bin/python -m tests.helpers.commands_doc"
    )
    for name in COMMANDS:  # every command has its section with its own usage line
        assert f"## harness {name}\n" in doc and f"usage: harness {name}" in doc, name


def test_check_fails_on_a_stale_page_and_passes_on_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = tmp_path / "commands.md"
    stale.write_text(commands_doc.render().replace("--dry-run", "--dryrun", 1), encoding="utf-8")
    monkeypatch.setattr(commands_doc, "DOC", stale)
    assert commands_doc.main(["--check"]) == 1
    stale.write_text(commands_doc.render(), encoding="utf-8")
    assert commands_doc.main(["--check"]) == 0


def test_the_width_of_the_terminal_does_not_change_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    first = commands_doc.render()
    monkeypatch.setenv("COLUMNS", "40")
    assert commands_doc.render() == first
