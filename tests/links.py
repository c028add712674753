#!/usr/bin/env python3
"""Every relative link of the repository's Markdown resolves.

Checks each Markdown file git tracks (`git ls-files '*.md'`; nothing under
a `target/` directory): every inline link or image `[text](path)`,
`[text](path#anchor)` and `[text](#anchor)`, and every reference
definition `[id]: path`, outside code blocks and code spans. A path is
relative to the file (or, starting with `/`, to the repository root) and
must name a file or directory that exists; an anchor must be the
GitHub-style slug of a heading of the Markdown file it points into.
Links with a scheme (`https:`, `mailto:`, …) are not checked.

Each broken link is printed as `file:line: link (why)` and the exit code is
1; with none it prints a count and exits 0. Standard library only.

    python3 tests/links.py              # the repository
    python3 tests/links.py FILE.md …    # only these files
    python3 tests/links.py --self-test  # shows it finds broken links

For example, a file `a.md` holding `[x](missing.md)` and `[y](#nowhere)`
fails with:

    a.md:1: missing.md (no such file)
    a.md:1: #nowhere (no heading "nowhere" in a.md)
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]

# Fences may be indented (inside list items).
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
# [text](target "title"): text may hold one level of brackets and wrap lines.
INLINE = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"
    r"\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
)
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*(<[^>\n]*>|\S+)", re.MULTILINE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).|\n)*?(?<!`)\1(?!`)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)


def tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "*.md"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    files = []
    for name in filter(None, out.split("\0")):
        parts = Path(name).parts
        if "target" in parts or name.startswith("../shared"):
            continue
        files.append(ROOT / name)
    return files


def blank(text: str, pattern: re.Pattern[str]) -> str:
    """`text` with every match of `pattern` turned into spaces (newlines
    kept, so offsets and line numbers stay put)."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def unfenced(text: str) -> str:
    """The text with its fenced code blocks blanked out."""
    lines = text.split("\n")
    out = []
    fence = None
    for line in lines:
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append(" " * len(line))
        elif fence is not None:
            mark = m.group(1) if m else ""
            rest = line.strip()[len(mark) :].strip()
            if mark[:1] == fence[0] and len(mark) >= len(fence) and not rest:
                fence = None
            out.append(" " * len(line))
        else:
            out.append(line)
    return "\n".join(out)


def prose(text: str) -> str:
    """The text with fenced code blocks, code spans and HTML comments
    blanked out: links are looked for only in what is left."""
    return blank(blank(unfenced(text), HTML_COMMENT), CODE_SPAN)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links as their text, no
    markup) lowercased, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_ " or cat[0] in "LNM" or cat == "Pc":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(path: Path, cache: dict[Path, set[str]]) -> set[str]:
    if path not in cache:
        text = path.read_text(encoding="utf-8")
        lines = blank(unfenced(text), HTML_COMMENT).split("\n")
        found: set[str] = set(HTML_ANCHOR.findall(text))
        seen: dict[str, int] = {}
        for i, line in enumerate(lines):
            title = None
            m = ATX.match(line)
            if m:
                title = m.group(2)
            elif i > 0 and SETEXT.match(line) and lines[i - 1].strip():
                prev = lines[i - 1]
                if not re.match(r"^\s*([|>#*+-]|\d+[.)])", prev):
                    title = prev
            if title is None:
                continue
            base = slug(title)
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every link in the text's prose."""
    clean = prose(text)
    out = []
    for pattern in (INLINE, REFDEF):
        for m in pattern.finditer(clean):
            target = m.group(1).strip()
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            out.append((clean.count("\n", 0, m.start(1)) + 1, target))
    return sorted(out)


def broken(path: Path, cache: dict[Path, set[str]]) -> list[str]:
    """`file:line: link (why)` for each broken link of `path`."""
    try:
        shown = path.relative_to(ROOT)
    except ValueError:
        shown = path
    problems = []
    for line, target in links(path.read_text(encoding="utf-8")):
        if not target or SCHEME.match(target):
            continue
        where, _, anchor = target.partition("#")
        where = unquote(where)
        if not where:
            dest = path
        elif where.startswith("/"):
            dest = ROOT / where.lstrip("/")
        else:
            dest = path.parent / where
        why = None
        if not dest.exists():
            why = "no such file"
        elif anchor and dest.is_file() and dest.suffix.lower() == ".md":
            if unquote(anchor).lower() not in anchors(dest.resolve(), cache):
                name = dest.name if where else shown
                why = f'no heading "{anchor}" in {name}'
        if why:
            problems.append(f"{shown}:{line}: {target} ({why})")
    return problems


def check(files: list[Path]) -> list[str]:
    cache: dict[Path, set[str]] = {}
    out = []
    for f in files:
        out.extend(broken(f, cache))
    return out


def self_test() -> int:
    """A file with good and broken links: the broken ones, and only they,
    are found."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "sub").mkdir()
        (root / "sub" / "b.md").write_text(
            "# Spend caps: stop before the money goes out\n\n## Local use: `--auth disabled`\n"
        )
        a = root / "a.md"
        a.write_text(
            "# Title\n"
            "[ok](sub/b.md) [ok](sub/b.md#spend-caps-stop-before-the-money-goes-out)\n"
            "[ok](sub/b.md#local-use---auth-disabled) [ok](#title) [ok](sub/)"
            " [web](https://example.com/x)\n"
            "`[code](nowhere.md)`\n"
            "```sh\n[fenced](nowhere.md)\n```\n"
            "[bad](missing.md) and [bad\nanchor](sub/b.md#nope)\n"
            "[bad self](#nowhere)\n"
        )
        found = check([a])
    want = [
        f"{a}:8: missing.md (no such file)",
        f'{a}:9: sub/b.md#nope (no heading "nope" in b.md)',
        f'{a}:10: #nowhere (no heading "nowhere" in {a})',
    ]
    if found != want:
        print("self-test failed: found", *found, "wanted", *want, sep="\n  ")
        return 1
    print("self-test passed: the 3 broken links of 10 were found")
    return 0


def main(argv: list[str]) -> int:
    if argv == ["--self-test"]:
        return self_test()
    files = [Path(a).resolve() for a in argv] if argv else tracked()
    problems = check(files)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken link(s) in {len(files)} Markdown files", file=sys.stderr)
        return 1
    print(f"links: {len(files)} Markdown files, every relative link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
