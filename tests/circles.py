#!/usr/bin/env python3
"""Import circles per crate and Python package.

Rust: the module graph from `crate::a::b…`, `super::…`, `self::…` and
`crate::{a::b, c}` paths in code (comments and the trailing
`#[cfg(test)] mod` blanked), at two levels: the crate's top-level modules (its
rooms must layer) and every file's module (no circle inside a room
either; an edge between a module and its own parent or child is not
counted). Python: `from pkg.a import …` and `import pkg.a` between a
package's top-level modules. Each strongly connected component of more
than one module is printed; the exit status is 1 when there is any.

    python3 tests/circles.py            # the circles, exit 1 if any
    python3 tests/circles.py --count    # a table: graph, modules, circles
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


def without_tests(text: str) -> str:
    """Rust source without its test module (by convention the file's end):
    a `super::` inside it names the file's own module, not its parent."""
    m = re.search(r"#\[cfg\(test\)\]\s*(?:pub(?:\([\w:]+\))?\s+)?mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


RELATIVE = re.compile(r"(?<![\w:])(crate::|self::|(?:super::)+)")


def crate_paths(code: str, module: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every path named by `crate::a::b…`, `super::…`, `self::…` (from
    `module`) and `crate::{a::b…, c}` (nested groups included), as tuples of
    identifiers from the crate root."""
    found: set[tuple[str, ...]] = set()

    def walk(prefix: tuple[str, ...], text: str) -> None:
        # `text` starts right after `prefix::`.
        if text.startswith("{"):
            depth, item = 0, ""
            for ch in text:
                if ch == "{":
                    depth += 1
                    if depth == 1:
                        continue
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        walk_item(prefix, item)
                        return
                if depth == 1 and ch == ",":
                    walk_item(prefix, item)
                    item = ""
                else:
                    item += ch
            return
        if text.startswith("*"):
            found.add(prefix)
            return
        m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text)
        if not m:
            return
        rest = text[m.end() :]
        if rest.startswith("::"):
            walk((*prefix, m.group(0)), rest[2:])
        else:
            found.add((*prefix, m.group(0)))

    def walk_item(prefix: tuple[str, ...], item: str) -> None:
        item = item.strip()
        if item and not item.startswith("self"):
            walk(prefix, item)
        elif prefix:
            found.add(prefix)

    for m in RELATIVE.finditer(code):
        lead = m.group(1)
        if lead == "crate::":
            base: tuple[str, ...] = ()
        elif lead == "self::":
            base = module
        else:
            up = lead.count("super::")
            base = module[: max(len(module) - up, 0)]
        walk(base, code[m.end() :])
    return found


def rust_module(src: Path, file: Path) -> tuple[str, ...]:
    """A file's module path (`()` for the crate root)."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    if parts in (["lib"], ["main"]):
        parts = []
    return tuple(parts)


def rust_graphs() -> dict[str, dict[str, set[str]]]:
    graphs: dict[str, dict[str, set[str]]] = {}
    for manifest in tracked("*Cargo.toml"):
        src = manifest.parent / "src"
        if not src.is_dir():
            continue
        name = manifest.parent.relative_to(ROOT).as_posix()
        files = {rust_module(src, f): f for f in src.rglob("*.rs")}
        rooms: dict[str, set[str]] = {m[0]: set() for m in files if m}
        modules: dict[str, set[str]] = {"::".join(m): set() for m in files if m}
        for module, file in files.items():
            if not module:
                continue
            code = without_tests(without_comments(file.read_text(encoding="utf-8")))
            for path in crate_paths(code, module):
                target = next(
                    (path[:n] for n in range(len(path), 0, -1) if path[:n] in files), None
                )
                if target is None:
                    continue
                if target[0] != module[0]:
                    rooms[module[0]].add(target[0])
                related = target[: len(module)] == module or module[: len(target)] == target
                if not related:
                    modules["::".join(module)].add("::".join(target))
        graphs[name] = rooms
        graphs[f"{name} (modules)"] = modules
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
            rel = file.relative_to(package).parts
            if "_proto" in rel:
                continue
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


def check_reader() -> None:
    """The reader's own invariant, checked on every run: a circle spelled
    with `super::` (the one `crate::`-only reading missed in
    services/server's job::media and job::validate) is counted, and a
    test module's `super::` names its own file."""
    media = crate_paths("fn f() { super::validate::MAX_ACCOUNT }", ("job", "media"))
    validate = crate_paths("use super::media::{self, creating_media};", ("job", "validate"))
    assert ("job", "validate", "MAX_ACCOUNT") in media, media
    assert ("job", "media") in validate and ("job", "media", "creating_media") in validate
    graph = {"job::media": {"job::validate"}, "job::validate": {"job::media"}}
    assert circles(graph) == [["job::media", "job::validate"]]
    assert crate_paths("use self::a::B; use super::super::c;", ("x", "y")) == {
        ("x", "y", "a", "B"),
        ("c",),
    }
    assert "super" not in without_tests("fn a() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n")


def main() -> int:
    check_reader()
    count_only = "--count" in sys.argv[1:]
    total = 0
    for name, graph in sorted({**rust_graphs(), **python_graphs()}.items()):
        found = circles(graph)
        total += len(found)
        if count_only:
            print(f"{name:50} {len(graph):4} modules {len(found):3} circles")
        else:
            for c in found:
                print(f"{name}: {{{', '.join(c)}}}")
    if count_only:
        print(f"{'total':50} {'':13} {total:3} circles")
        return 0
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
