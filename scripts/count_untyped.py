"""Count untyped-dict markers in the summary's writers and readers (issue 25's before/after figures).

Per package: `dict[str, Any]` annotations; lookups by a literal string key (`x["key"]`,
`x.get("key"...)`), the ways code reaches into an untyped summary; and, apart, writes by a literal
key (`x["key"] = ...`, a builder filling a dict). Comments and docstrings are not counted.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import tokenize
from pathlib import Path

UNTYPED = re.compile(r"dict\s*\[\s*str\s*,\s*Any\s*\]")
SUBSCRIPT = re.compile(r"\[\s*(\"[^\"]*\"|'[^']*')\s*\](?!\s*=[^=])")
WRITE = re.compile(r"\[\s*(\"[^\"]*\"|'[^']*')\s*\]\s*=[^=]")
GET = re.compile(r"\.get\(\s*(\"[^\"]*\"|'[^']*')")


def code_text(path: Path) -> str:
    """The file with comments and docstrings blanked, so only code is counted."""
    src = path.read_text(encoding="utf-8")
    out: list[str] = []
    prev = tokenize.INDENT
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.STRING and prev in (tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT):
            prev = tok.type
            continue  # a docstring or a bare string statement
        if tok.type not in (tokenize.NL, tokenize.ENCODING):
            prev = tok.type
        out.append(tok.string if tok.type != tokenize.NEWLINE else "\n")
        out.append(" ")
    return "".join(out)


def count(paths: list[Path]) -> tuple[int, int, int]:
    """(dict[str, Any] annotations, string-key lookups, string-key writes) over the .py files under paths."""
    untyped = lookups = writes = 0
    for root in paths:
        for f in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            text = code_text(f)
            untyped += len(UNTYPED.findall(text))
            lookups += len(SUBSCRIPT.findall(text)) + len(GET.findall(text))
            writes += len(WRITE.findall(text))
    return untyped, lookups, writes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="*", type=Path, default=[Path("harness/summarize"), Path("harness/report")])
    args = p.parse_args(argv)
    total = [0, 0, 0]
    for path in args.paths:
        u, n, w = count([path])
        total = [total[0] + u, total[1] + n, total[2] + w]
        print(f"{path}: {u} dict[str, Any], {n} string-key lookups, {w} string-key writes")
    print(f"total: {total[0]} dict[str, Any], {total[1]} string-key lookups, {total[2]} string-key writes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
