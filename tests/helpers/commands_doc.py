#!/usr/bin/env python3
"""docs/commands.md from the argparse parsers of harness.cli.COMMANDS: the flags are written once, in code.

.venv/bin/python -m tests.helpers.commands_doc          # rewrite docs/commands.md
.venv/bin/python -m tests.helpers.commands_doc --check  # exit 1 when the committed file differs (tests do this)
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from harness.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "commands.md"
WIDTH = "100"  # argparse wraps help at $COLUMNS: fixed, so the page does not depend on the terminal
GUIDES = {  # where a command's guide is; the flags themselves are below, from the parser
    "run": "run-attached.md",
    "bench": "specs.md",
    "fleet": "fleet.md",
    "serve-sim": "sim.md",
    "summarize": "summary.md",
    "report": "reading-results.md",
    "compare": "reading-results.md",
    "validate": "telemetry.md",
    "gpu": "telemetry.md",
    "whatif": "whatif.md",
    "advise": "advise.md",
}
HEAD = """# Commands

_Generated from the parsers in `harness/` by `tests/helpers/commands_doc.py`: edit the parser, then run
`.venv/bin/python -m tests.helpers.commands_doc` (tests fail while this page and the parsers differ)._

Every command has `--help`; `harness --version`. Exit codes: 0 ok, 1 something flagged or failed,
2 bad input (one line naming the file, key and value, never a traceback), 124 a time limit reached with
what finished kept (`advise --confirm-time-limit`), 130 stopped by Ctrl-C or SIGTERM (records kept).

"""


def _help(name: str) -> str:
    module = importlib.import_module(COMMANDS[name][0])
    parser: argparse.ArgumentParser = module.build_parser(f"harness {name}")
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        return parser.format_help().rstrip()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def render() -> str:
    rows = ["| command | what it does | guide |", "|---|---|---|"]
    for name, (_, line) in COMMANDS.items():
        guide = GUIDES.get(name)
        rows.append(
            f"| [`harness {name}`](#harness-{name}) | {line} | {f'[{guide}]({guide})' if guide else ''} |"
        )
    parts = [HEAD + "\n".join(rows) + "\n"]
    for name in COMMANDS:
        parts.append(f"## harness {name}\n\n```text\n{_help(name)}\n```\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/commands.md differs")
    args = ap.parse_args(argv)
    return write_or_check(DOC, render(), args.check, "differs from the parsers", "commands_doc")


def write_or_check(doc: Path, text: str, check: bool, what: str, module: str) -> int:
    """A generated page: written, or with `check` compared (1 and a line naming the fix when it differs)."""
    if check:
        if not doc.exists() or doc.read_text(encoding="utf-8") != text:
            print(f"{doc}: {what}; run .venv/bin/python -m tests.helpers.{module}", file=sys.stderr)
            return 1
        return 0
    doc.write_text(text, encoding="utf-8")
    print(f"wrote {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
