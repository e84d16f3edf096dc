#!/usr/bin/env python3
"""docs/summary.md from the types of harness.summary.model: the schema is written once, in code.

.venv/bin/python -m tests.helpers.summary_doc # rewrite docs/summary.md
.venv/bin/python -m tests.helpers.summary_doc --check  # exit 1 when the committed file differs (tests do this)
"""

from __future__ import annotations

import argparse
import inspect
import sys
import types
import typing
from pathlib import Path

from harness.summary import SCHEMA_VERSION
from harness.summary import model as m
from harness.summary.io import READABLE_MAJORS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "summary.md"

HEAD = """# Summary schema (`summaries/<node>.json`)

_Generated from the types in `harness/summary/model.py` by `tests/helpers/summary_doc.py`: edit the types,
then run it (tests/summary/test_model.py fails when this file and the types disagree)._

`harness summarize CAPTURE_DIR… -o summaries/` writes one file per node; `harness report`, `harness
validate`, `harness compare` and `harness fleet` read it back through the same types. Several capture
folders of one node merge into one file (the same point in two folders: the ok one, else the first, is
kept and the other listed under `problems`). Times are seconds, rates are fractions (0.5 = 50 %), token
counts are tokens. A figure the data cannot give is `null`, never 0; a key a writer did not set is
absent. Every object keeps keys it does not declare (figures gain keys per server kind).
`Num` is a JSON number (an int stays an int), `JSON` any JSON value.

Schema version {version}; files of schema {readable} read (schema 2 added the top-level `verdict`).
"""

TAIL = """The report's "Predicted vs measured" table puts each point's measured hit rate beside what
`harness whatif` predicts for the same requests on the same server settings, with the difference
(flagged over 3 points) and, for traces, the ideal ([prediction against measurement](whatif.md#prediction-against-measurement)).
The report's "Hit rate by source" table shows the four sources side by side with the block size (n/a
where that point has no such figure, and the note under the table says why).
"""


def _type(tp: object) -> str:
    """An annotation as a reader of the JSON says it: `Num | null`, `list[Pair]`, `{str: Seed}`."""
    if tp is type(None):
        return "null"
    if tp is m.JsonValue or str(tp).endswith("JsonValue"):
        return "JSON"
    if inspect.isclass(tp) and issubclass(tp, m.Record):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (typing.Union, types.UnionType):
        names = [_type(a) for a in args]
        if names[:2] == ["int", "float"]:
            names = ["Num", *names[2:]]
        return " \\| ".join(dict.fromkeys(names))
    if origin is list:
        return f"list[{_type(args[0])}]"
    if origin is dict:
        return f"{{str: {_type(args[1])}}}"
    return getattr(tp, "__name__", str(tp))


def _cell(text: str | None) -> str:
    """A description as one table cell: a `|` in it would end the cell."""
    return (text or "").replace("|", "\\|")


def _records() -> list[type[m.Record]]:
    """Every record reachable from Summary, top level first, each once."""
    seen: list[type[m.Record]] = []
    todo: list[type[m.Record]] = [m.Summary]
    while todo:
        cls = todo.pop(0)
        if cls in seen:
            continue
        seen.append(cls)
        for f in cls.model_fields.values():
            todo += [t for t in _inner(f.annotation) if t not in seen]
    return seen


def _inner(tp: object) -> list[type[m.Record]]:
    if inspect.isclass(tp) and issubclass(tp, m.Record):
        return [tp]
    return [r for a in typing.get_args(tp) for r in _inner(a)]


def render() -> str:
    readable = " and ".join(str(v) for v in READABLE_MAJORS)
    lines = [HEAD.format(version=SCHEMA_VERSION, readable=readable)]
    for cls in _records():
        lines += [f"## {cls.__name__}", ""]
        doc = cls.__dict__.get("__doc__")
        if doc:
            lines += [inspect.cleandoc(doc), ""]
        lines += ["| key | type | required | meaning |", "|---|---|---|---|"]
        for name, f in cls.model_fields.items():
            lines.append(
                f"| `{name}` | {_type(f.annotation)} | {'yes' if f.is_required() else ''} | {_cell(f.description)} |"
            )
        lines.append("")
    lines.append(TAIL)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="docs/summary.md from harness.summary.model")
    p.add_argument("--check", action="store_true", help="exit 1 when docs/summary.md differs")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print(
                f"{DOC}: differs from the types; run .venv/bin/python -m tests.helpers.summary_doc",
                file=sys.stderr,
            )
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main())
