#!/usr/bin/env python3
"""Import circles per crate and Python package: the module graph built from
`crate::a::…` paths in Rust code (comments and string-free lines only) and
`from pkg.a import …` / `import pkg.a` in Python, and each strongly
connected component of more than one module printed. Exits 1 when any crate
has a circle (`--count` prints the counts and always exits 0).

    python3 tests/circles.py            # every crate and package
    python3 tests/circles.py --count    # a table: crate, modules, circles
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))")


def tracked(pattern: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", pattern], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    return [ROOT / line for line in out.splitlines() if line]


def without_comments(text: str) -> str:
    """Rust source with `//` and `/* */` comments blanked (string literals
    are not parsed: a `//` inside one ends the line early, which only ever
    drops paths, never invents them)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def crate_paths(code: str) -> set[str]:
    """The top-level modules named by `crate::a…` and `crate::{a…, b…}`."""
    found: set[str] = set()
    for m in re.finditer(r"\bcrate::", code):
        rest = code[m.end() :]
        if not rest.startswith("{"):
            ident = re.match(r"[a-z_][a-z0-9_]*", rest)
            if ident:
                found.add(ident.group(0))
            continue
        depth, item, items = 0, "", []
        for ch in rest:
            if ch == "{":
                depth += 1
                if depth == 1:
                    continue
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    items.append(item)
                    break
            if depth == 1 and ch == ",":
                items.append(item)
                item = ""
            elif depth >= 1:
                item += ch
        for it in items:
            ident = re.match(r"\s*([a-z_][a-z0-9_]*)", it)
            if ident and ident.group(1) != "self":
                found.add(ident.group(1))
    return found


def rust_module(src: Path, file: Path) -> str:
    """The top-level module a file belongs to (`lib`/`main` for the root)."""
    rel = file.relative_to(src).parts
    return rel[0].removesuffix(".rs") if len(rel) == 1 else rel[0]


def rust_graphs() -> dict[str, dict[str, set[str]]]:
    graphs: dict[str, dict[str, set[str]]] = {}
    for manifest in tracked("*Cargo.toml"):
        src = manifest.parent / "src"
        if not src.is_dir():
            continue
        name = manifest.parent.relative_to(ROOT).as_posix()
        graph: dict[str, set[str]] = {}
        for file in src.rglob("*.rs"):
            module = rust_module(src, file)
            edges = graph.setdefault(module, set())
            code = without_comments(file.read_text(encoding="utf-8"))
            edges.update(crate_paths(code) - {module})
        for edges in graph.values():
            edges.intersection_update(graph.keys())
        graphs[name] = graph
    return graphs


def python_graphs() -> dict[str, dict[str, set[str]]]:
    graphs: dict[str, dict[str, set[str]]] = {}
    for init in tracked("*/__init__.py"):
        package = init.parent
        if (package.parent / "__init__.py").exists() or "_proto" in package.parts:
            continue
        name = package.name
        graph: dict[str, set[str]] = {}
        for file in package.rglob("*.py"):
            if "_proto" in file.relative_to(package).parts:
                continue
            rel = file.relative_to(package).parts
            module = rel[0].removesuffix(".py")
            if module == "__init__":
                continue
            edges = graph.setdefault(module, set())
            for line in file.read_text(encoding="utf-8").splitlines():
                m = PY_IMPORT.match(line)
                if not m:
                    continue
                parts = (m.group(1) or m.group(2)).split(".")
                if parts[0] == name and len(parts) > 1 and parts[1] != module:
                    edges.add(parts[1])
        for edges in graph.values():
            edges.intersection_update(graph.keys())
        graphs[f"{package.relative_to(ROOT).as_posix()} (python)"] = graph
    return graphs


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    count_only = "--count" in sys.argv[1:]
    total = 0
    for name, graph in sorted({**rust_graphs(), **python_graphs()}.items()):
        found = circles(graph)
        total += len(found)
        if count_only:
            print(f"{name:40} {len(graph):4} modules {len(found):3} circles")
        for c in found:
            if not count_only:
                print(f"{name}: {{{', '.join(c)}}}")
    if count_only:
        print(f"{'total':40} {'':13} {total:3} circles")
        return 0
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
