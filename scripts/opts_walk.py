"""How far one BenchOptions travels (issue 25): from an entry function, every call that passes `opts`
on (or a `dataclasses.replace` copy of it), depth first in source order, each call site one stop.

    python scripts/opts_walk.py harness.commands.bench:run [ROOT]

Prints the walk, then its stops, files, file switches (consecutive stops in different files) and depth.
Read from the source with `ast`; calls are resolved by name (same module, or imported by name).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

Func = ast.FunctionDef | ast.AsyncFunctionDef


def index(root: Path) -> tuple[dict[str, tuple[Func, str, Path]], dict[str, dict[str, str]]]:
    """Every function and method ("module:name"), and each module's harness imports (alias -> target)."""
    funcs: dict[str, tuple[Func, str, Path]] = {}
    imports: dict[str, dict[str, str]] = {}
    for p in (root / "harness").rglob("*.py"):
        parts = p.relative_to(root).with_suffix("").parts
        mod = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(p.read_text())
        imp = imports.setdefault(mod, {})
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("harness"):
                imp.update({a.asname or a.name: f"{n.module}.{a.name}" for a in n.names})
            elif isinstance(n, ast.Import):
                imp.update({a.asname or a.name: a.name for a in n.names if a.name.startswith("harness")})
        for n in tree.body:
            if isinstance(n, Func):
                funcs[f"{mod}:{n.name}"] = (n, mod, p)
            if isinstance(n, ast.ClassDef):
                for m in n.body:
                    if isinstance(m, Func):
                        funcs[f"{mod}:{n.name}.{m.name}"] = (m, mod, p)
    return funcs, imports


def walk(root: Path, entry: str, param: str = "opts") -> list[tuple[int, str, str]]:
    funcs, imports = index(root)

    def resolve(mod: str, call: ast.Call) -> str | None:
        f = call.func
        if isinstance(f, ast.Name):
            if f"{mod}:{f.id}" in funcs:
                return f"{mod}:{f.id}"
            m, _, name = imports[mod].get(f.id, "").rpartition(".")
            return f"{m}:{name}" if f"{m}:{name}" in funcs else None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            t = imports[mod].get(f.value.id)
            return f"{t}:{f.attr}" if t and f"{t}:{f.attr}" in funcs else None
        return None

    def receiver(callee: str, call: ast.Call, name: str) -> str | None:
        node = funcs[callee][0]
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        for i, a in enumerate(call.args):
            if isinstance(a, ast.Name) and a.id == name and i < len(params):
                return params[i]
        return next(
            (k.arg for k in call.keywords if isinstance(k.value, ast.Name) and k.value.id == name), None
        )

    out: list[tuple[int, str, str]] = []

    def visit(q: str, pname: str, depth: int, stack: frozenset[str]) -> None:
        node, mod, path = funcs[q]
        out.append((depth, q, str(path.relative_to(root))))
        names = {pname}
        for n in ast.walk(node):  # copies: x = dataclasses.replace(opts, ...)
            if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)):
                continue
            v = n.value
            if (
                isinstance(v, ast.Call)
                and isinstance(v.func, ast.Attribute)
                and v.func.attr == "replace"
                and v.args
                and isinstance(v.args[0], ast.Name)
                and v.args[0].id == pname
            ):
                names.add(n.targets[0].id)
        calls = sorted(
            (n for n in ast.walk(node) if isinstance(n, ast.Call)), key=lambda c: (c.lineno, c.col_offset)
        )
        for c in calls:
            callee = resolve(mod, c)
            if callee and callee not in stack:
                got = next((p for nm in sorted(names) if (p := receiver(callee, c, nm))), None)
                if got:
                    visit(callee, got, depth + 1, stack | {callee})

    visit(entry, param, 0, frozenset({entry}))
    return out


def main() -> int:
    entry = sys.argv[1] if len(sys.argv) > 1 else "harness.commands.bench:run"
    root = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parents[1]
    stops = walk(root, entry)
    for depth, q, f in stops:
        print("  " * depth + q, f"({f})")
    files = [f for _, _, f in stops[1:]]  # the entry builds opts: it is not a stop
    switches = sum(a != b for a, b in zip(files, files[1:], strict=False))
    print(
        f"stops {len(files)}, files {len(set(files))}, file switches {switches}, depth {max(d for d, _, _ in stops)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
