"""The documents hold together: every relative link and #anchor in README.md and docs/ resolves, every
document the code cites is in the repository (not in a folder beside it), and the README stays short."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve()  # its own fixtures cite missing documents on purpose
README_LIMIT = 15_000  # characters: a newcomer reads it in minutes; reference chapters live in docs/

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# a cited document: a path ending in .md whose name is written out (not `<node>.md`, `{x}.md`, `*.md`)
_CITED = re.compile(r"(?<![\w<>{}*.\-/])((?:\.\./|[\w.\-]+/)*\w[\w.\-]*\.md)\b")


def _prose_lines(text: str) -> list[str]:
    """The Markdown's lines outside fenced code blocks (links and headings there are not links)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file defines (a repeated heading gets -1, -2, … as on GitHub)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(md: Path, root: Path) -> list[str]:
    """`file: target (why)` for each relative link or anchor in `md` that does not resolve inside `root`."""
    bad = []
    for line in _prose_lines(md.read_text(encoding="utf-8")):
        for m in _LINK.finditer(_CODE_SPAN.sub("", line)):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.\-]*:", target, re.I):  # http:, https:, mailto:
                continue
            rel, _, anchor = target.partition("#")
            dest = (md.parent / rel).resolve() if rel else md.resolve()
            where = f"{md.relative_to(root)}: {target}"
            if not dest.is_relative_to(root.resolve()):
                bad.append(f"{where} (outside the repository)")
            elif not dest.exists():
                bad.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{where} (no heading #{anchor})")
    return bad


def _texts(path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(line, text) of a module's docstrings and comments (where it cites documents), then of its other
    string constants (file names it writes, and the odd citation inside data, such as a source's name)."""
    src = path.read_text(encoding="utf-8")
    prose, strings, docs = [], [], set()
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0].value if node.body and isinstance(node.body[0], ast.Expr) else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                prose.append((first.lineno, first.value))
                docs.add(id(first))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            strings.append((node.lineno, node.value))
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            prose.append((tok.start[0], tok.string))
    return prose, strings


def _ignored_dirs(root: Path) -> tuple[str, ...]:
    """Top-level folders git ignores (.gitignore `name/` lines): a path there is an output, not a document."""
    gi = root / ".gitignore"
    lines = gi.read_text(encoding="utf-8").splitlines() if gi.exists() else []
    return tuple(ln.strip() for ln in lines if re.fullmatch(r"[\w.\-]+/", ln.strip()))


def missing_citations(root: Path, folders: tuple[str, ...]) -> list[str]:
    """`file:line: <document>` for each document a docstring or comment cites that the repository lacks,
    and each string anywhere that names one in a folder beside the repository (`../…`, `shared/…`).

    A citation resolves from the repository root, from docs/, or from the citing file's folder."""
    outputs = _ignored_dirs(root)
    bad = []
    for folder in folders:
        for py in sorted((root / folder).rglob("*.py")):
            if any(part in {".venv", "data"} for part in py.relative_to(root).parts) or py == SELF:
                continue
            prose, strings = _texts(py)
            cited = {(ln, m.group(1)) for ln, text in prose for m in _CITED.finditer(text)}
            for ln, text in strings:  # a file name in code is no citation; a path out of the tree is
                cited |= {(ln, n) for n in _CITED.findall(text) if n.startswith("../") or "shared/" in n}
            for line, name in sorted(cited):
                if name.startswith(outputs):
                    continue  # something a run writes (reports/…, summaries/…)
                found = [(base / name).resolve() for base in (root, root / "docs", py.parent)]
                if not any(p.is_file() and p.is_relative_to(root.resolve()) for p in found):
                    bad.append(f"{py.relative_to(root)}:{line}: {name}")
    return bad


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_relative_link_and_anchor_resolves() -> None:
    bad = [b for md in _documents() for b in broken_links(md, ROOT)]
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_no_document_points_beside_the_repository() -> None:
    """A reader of a clone has no ../shared: facts the docs rest on are written into docs/ instead."""
    bad = [
        f"{md.relative_to(ROOT)}:{i}"
        for md in _documents()
        for i, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"(?:\.\./)+shared/|/work/shared\b|shared/reference/", line)
    ]
    assert not bad, "documents outside the repository cited at:\n" + "\n".join(bad)


def test_every_cited_document_is_in_the_repository() -> None:
    bad = missing_citations(ROOT, ("harness", "scripts", "tests"))
    assert not bad, "cited documents missing (write them under docs/ and cite that):\n" + "\n".join(bad)


def test_readme_stays_short() -> None:
    n = len((ROOT / "README.md").read_text(encoding="utf-8"))
    assert n < README_LIMIT, (
        f"README.md is {n:,} characters (limit {README_LIMIT:,}): move reference to docs/"
    )


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """A missing file, a missing heading, a path out of the tree and a citation of ../shared are caught;
    an external URL, a link inside code, a good anchor and an output path are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / ".gitignore").write_text("reports/\n*.pyc\n")
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Two `words`: here\n\n## Two `words`: here\n")
    (tmp_path / "README.md").write_text(
        "# R\n\n[ok](docs/a.md#two-words-here) [dup](docs/a.md#two-words-here-1) [self](#r)\n"
        "[gone](docs/b.md) [bad anchor](docs/a.md#nowhere) [out](../elsewhere.md)\n"
        "[web](https://example.com/x.md) `[code](docs/none.md)`\n\n```\n[fenced](docs/none.md)\n```\n"
    )
    got = broken_links(tmp_path / "README.md", tmp_path)
    assert got == [
        "README.md: docs/b.md (no such file)",
        "README.md: docs/a.md#nowhere (no heading #nowhere)",
        "README.md: ../elsewhere.md (outside the repository)",
    ]
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        '"""Facts: ../shared/reference/sglang.md; layout: a.md."""\n\n'
        "X = 'docs/none.md'  # counts from reference/real.md; writes reports/out.md and summaries/<node>.md\n"
        "SRC = ('a real log', 'shared/reference/sglang.md, 17:34:02')\n"
    )
    assert missing_citations(tmp_path, ("pkg",)) == [
        "pkg/m.py:1: ../shared/reference/sglang.md",
        "pkg/m.py:3: reference/real.md",
        "pkg/m.py:4: shared/reference/sglang.md",
    ]


def test_every_path_architecture_md_names_exists() -> None:
    """A module moved or renamed shows here, not as a newcomer's dead end: each backticked repository
    path (`harness/…`, `tests/…`, …); the module list is the tree's own (tests/test_architecture_doc.py)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    quoted = re.findall(r"`((?:harness|tests|scripts|benchmarks|workloads|docs)/[\w./-]*)`", text)
    assert len(quoted) > 20  # the paths were read, not skipped
    gone = sorted({p for p in quoted if not (ROOT / p.rstrip("/")).exists()})
    assert not gone, f"docs/architecture.md names paths that do not exist: {gone}"


def test_the_quoted_verdict_line_is_the_samples_own() -> None:
    """README and reading-results quote the committed sample's verdict line between markers that
    `make docs` (scripts/docs_sample.py) rewrites, so the example cannot go stale."""
    import json

    line = json.loads((ROOT / "docs" / "sample" / "cpu-sim.json").read_text(encoding="utf-8"))["verdict"][
        "line"
    ]
    for rel in ("README.md", "docs/reading-results.md"):
        text = (ROOT / rel).read_text(encoding="utf-8")
        quoted = re.findall(r"<!-- verdict:begin -->`([^`]*)`<!-- verdict:end -->", text)
        assert quoted == [line], (
            f"{rel}: run `make docs` (scripts/docs_sample.py rewrites the verdict example)"
        )
