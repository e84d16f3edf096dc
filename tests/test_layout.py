"""The package's shape (issues 12, 25): few top-level modules, no import cycle, packages imported in
one direction only (LAYERS), no library module importing commands/, long modules say why; and tests/
mirroring the package (tests/<package>/ for harness/<package>/), so a test is found where its code is.

Read from the source with `ast`, nothing imported, so these run in `make check`. The KNOWN_* sets
name what is left to fix; a test fails when an entry is fixed too, so the lists only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "harness"
MAX_TOP_LEVEL = 9  # besides __init__ and __main__
MAX_LINES = 500
# a module longer than MAX_LINES must say in its docstring why it is one file, with these words
WHY_ONE_FILE = "one file"
KNOWN_CYCLES: set[frozenset[str]] = set()
KNOWN_LONG: set[str] = set()  # to split, or to say why not
# The packages (and top-level modules) in the order imports may point: each imports only names above
# it, never one below or beside it. The same list, with a reason per line, is in docs/architecture.md.
LAYERS: tuple[str, ...] = (
    "harness",  # __init__: the version
    "errors",
    "signals",  # a stop signal becomes a stop: one rule for every command
    "paths",
    "metrics",
    "tokenizer",
    "protocol",  # wire formats both ends speak (the lockstep header): below the sim and the client
    "spec",
    "workloads",
    "capture",
    "telemetry",
    "serverlog",
    "engines",  # one adapter per engine (launch line, reset, metric names, venv), in one registry
    "client",
    "sim",
    "whatif",
    "loadgen",
    "servers",
    "summary",  # the typed summary records
    "verdicts",  # every verdict: clocks, the cold cache, the verdict line
    "summarize",
    "report",
    "sweep",
    "realserver",
    "fleet",
    "advise",  # traffic -> curve, what-if grid, recommendation; --confirm runs candidates as a sweep
    "commands",
    "cli",
    "__main__",
)


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module → harness modules it imports, at any depth (a deferred import still makes a cycle)."""

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                # `from pkg import submodule` needs the submodule; `from pkg import name` pkg's __init__
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs + ([base] if len(subs) < len(node.names) else [])
            else:
                continue
            graph[mod] |= {o for t in targets if t.startswith("harness") and (o := owner(t)) and o != mod}
    return graph


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: set[frozenset[str]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while (w := stack.pop()) != v:
                comp.add(w)
            if comp:
                out.add(frozenset(comp | {v}))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def _package(module: str) -> str:
    """harness.sweep.bench -> sweep; harness.errors -> errors; harness -> harness."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _package_imports(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the module imports behind that edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for mod, targets in graph.items():
        for t in targets:
            if _package(mod) != _package(t):
                edges.setdefault((_package(mod), _package(t)), []).append(f"{mod} -> {t}")
    return edges


def _against_layers(edges: dict[tuple[str, str], list[str]], layers: tuple[str, ...]) -> list[str]:
    """Every import of a package at or below the importer's place in `layers`, one line each."""
    rank = {name: i for i, name in enumerate(layers)}
    return [
        f"{a} imports {b}, which comes later in LAYERS: {', '.join(sorted(why))}"
        for (a, b), why in sorted(edges.items())
        if rank[b] >= rank[a]
    ]


def test_every_package_has_a_place_in_the_layers() -> None:
    names = {_package(m) for m in _modules()}
    assert names - set(LAYERS) == set(), "place the new package in LAYERS (and docs/architecture.md)"


def test_imports_point_one_way() -> None:
    assert _against_layers(_package_imports(_imports(_modules())), LAYERS) == []


def test_no_library_module_imports_commands() -> None:
    """commands/ parses arguments and prints; what another stage needs lives in the library below it."""
    graph = _imports(_modules())
    wrong = sorted(
        f"{m} -> {t}"
        for m, ts in graph.items()
        for t in ts
        if _package(t) == "commands" and _package(m) not in ("commands", "cli", "__main__")
    )
    assert wrong == []


def test_the_layer_check_catches_a_back_edge() -> None:
    graph = {"harness.a.x": {"harness.b.y"}, "harness.b.y": {"harness.a.z"}, "harness.a.z": set()}
    edges = _package_imports(graph)
    assert edges == {("a", "b"): ["harness.a.x -> harness.b.y"], ("b", "a"): ["harness.b.y -> harness.a.z"]}
    assert _against_layers(edges, ("a", "b")) == [
        "a imports b, which comes later in LAYERS: harness.a.x -> harness.b.y"
    ]
    assert _against_layers({("b", "a"): ["m"]}, ("a", "b")) == []


def test_docs_list_the_layers_in_order() -> None:
    """docs/architecture.md's "Layers" list names the same packages in the same order as LAYERS."""
    doc = (PKG.parent / "docs" / "architecture.md").read_text()
    section = doc.split("## Layers", 1)[1].split("\n## ", 1)[0]
    listed = [
        line.split("`")[1] for line in section.splitlines() if line.startswith(("1. ", "- ")) and "`" in line
    ]
    assert listed == list(LAYERS)


def test_few_top_level_modules() -> None:
    top = sorted(p.name for p in PKG.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} top-level modules (a stage belongs in a package): {top}"


def test_no_import_cycle() -> None:
    cycles = _cycles(_imports(_modules()))
    assert cycles - KNOWN_CYCLES == set(), [sorted(c) for c in cycles - KNOWN_CYCLES]
    assert KNOWN_CYCLES - cycles == set(), "fixed: remove from KNOWN_CYCLES"


def test_the_cycle_finder_finds_one(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == {frozenset({"a", "b", "c"})}
    assert _cycles({"a": {"b"}, "b": set()}) == set()


def test_long_modules_say_why_they_are_one_file() -> None:
    long = set()
    for p in PKG.rglob("*.py"):
        text = p.read_text()
        doc = (ast.get_docstring(ast.parse(text)) or "").lower()
        if len(text.splitlines()) > MAX_LINES and WHY_ONE_FILE not in doc:
            long.add(str(p.relative_to(PKG.parent)))
    assert long - KNOWN_LONG == set(), f"over {MAX_LINES} lines, no '{WHY_ONE_FILE}' reason in the docstring"
    assert KNOWN_LONG - long == set(), "fixed: remove from KNOWN_LONG"


# ------------------------------------------------------------------ tests/ mirrors the package
# tests/<package>/ holds the tests of harness/<package>/, tests/test_<module>.py those of a top-level
# harness/<module>.py. Beside them, only these folders and these top-level files, each for a reason:
TESTS = PKG.parent / "tests"
TEST_FOLDERS = {
    "helpers": "what tests share (processes, the CLI in a child, spec files, hand-built captures); no test",
    "data": "recorded inputs (a real vLLM log, a Mooncake trace slice)",
    "oracle": "the sim's radix tree against SGLang's own, in SGLang's venv (`oracle` mark)",
    "real_server": "llama.cpp's llama-server and vLLM, built or installed on first use (`real_server` mark)",
    "real_sglang": "SGLang 0.5.23's own server on the CPU (`sglang` mark), its conftest and agreement runs",
}
TOP_LEVEL_TESTS = {  # rules over the whole tree, or the test suite itself: no one package owns them
    "test_layout.py": "the package's shape and this mirror",
    "test_docs.py": "README.md and docs/ hold together",
    "test_architecture_doc.py": "docs/architecture.md lists every module of the tree, from its docstring",
    "test_verdicts_home.py": "which packages may judge (capture, loadgen, report, summarize do not)",
    "test_announce.py": "the suite's own setup lines (tests/helpers/announce.py) reach the terminal",
}


def _packages() -> set[str]:
    return {p.parent.name for p in PKG.glob("*/__init__.py")}


def test_every_test_folder_mirrors_a_package_or_says_why() -> None:
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    stray = folders - _packages() - set(TEST_FOLDERS)
    assert stray == set(), (
        f"tests/<folder> must be named after a harness/<package>/ (or be in TEST_FOLDERS): {stray}"
    )
    assert set(TEST_FOLDERS) <= folders, f"gone: remove from TEST_FOLDERS: {set(TEST_FOLDERS) - folders}"


def test_top_level_tests_are_of_top_level_modules_or_listed() -> None:
    modules = {p.stem for p in PKG.glob("*.py")}
    top = {p.name for p in TESTS.glob("test_*.py")}
    stray = {n for n in top if n.removeprefix("test_").removesuffix(".py") not in modules} - set(
        TOP_LEVEL_TESTS
    )
    assert stray == set(), f"move into tests/<package>/ the tests of harness/<package>/: {sorted(stray)}"
    assert set(TOP_LEVEL_TESTS) <= top, f"gone: remove from TOP_LEVEL_TESTS: {set(TOP_LEVEL_TESTS) - top}"


def test_test_folders_are_packages_and_helpers_hold_no_test() -> None:
    """tests import each other as `tests.<folder>.<module>`: every folder with Python in it is a package."""
    no_init = sorted(
        str(d.relative_to(TESTS))
        for d in {p.parent for p in TESTS.rglob("*.py")}
        if "__pycache__" not in d.parts and not (d / "__init__.py").exists()
    )
    assert no_init == []
    assert sorted(p.name for p in (TESTS / "helpers").rglob("test_*.py")) == []


def test_no_test_module_imports_another() -> None:
    """What two test files share lives in tests/helpers (or a folder's conftest), not in a test module."""
    wrong = []
    for p in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n.startswith("tests.") and n.rpartition(".")[2].startswith("test_") for n in names):
                wrong.append(f"{p.relative_to(TESTS)}: {names[0]}")
    assert wrong == []
