#!/usr/bin/env python3
"""Every relative link of the documentation resolves: the file or folder it names
exists, and its `#anchor` is a heading (or an `<a id>`/`<a name>`) of the Markdown file
it points into, slugged as GitHub slugs headings.

    python3 scripts/py/doc_links.py [FILE.md ...]   # default: README.md, ARCHITECTURE.md, docs/*.md
    python3 scripts/py/doc_links.py --self-test

Prints one line per broken link (`file:line: target: why`) and exits 1 if there is
any. Links with a scheme (https:, mailto:) are not fetched. Standard library only: the
test command runs it before the set-up has made a venv.
"""

import glob
import os
import re
import sys
import tempfile
import unicodedata
from urllib.parse import unquote

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# Setext headings: a text line underlined by === or ---.
SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
HTML_ANCHOR = re.compile(r"""<a\s+[^>]*?(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)
# [text](target "title") and ![alt](target); the text may hold one level of brackets.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+[\"'(][^)]*)?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
LINE_ANCHOR = re.compile(r"^L\d+(-L\d+)?$")


def slug_base(heading):
    """GitHub's slug of a heading's text, before duplicates are numbered: the rendered
    text (code spans, emphasis, links and tags reduced to their text), lower-cased,
    every character that is not a letter, digit, mark, `_`, `-` or space dropped, and
    spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "")
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in "-_" or ch == " " or cat[0] in "LNM":
            out.append("-" if ch == " " else ch)
    return "".join(out)


def lines_outside_code(text):
    """(line number, line) of every line that is not inside a fenced code block."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            continue
        if fence is not None:
            if m and m.group(1).startswith(fence) and not line.strip()[len(m.group(1)):].strip():
                fence = None
            continue
        yield n, line


def anchors(text):
    """The anchors a Markdown file defines: its headings' slugs (a repeated slug gets
    -1, -2, … as on GitHub) and the ids of its HTML anchors."""
    found, seen = set(), {}
    previous = None
    for _, line in lines_outside_code(text):
        found.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        title = m.group(2) if m else None
        if title is None and previous and previous.strip() and SETEXT.match(line) \
                and not HEADING.match(previous) and not previous.lstrip().startswith(("|", "-", "*", ">")):
            title = previous.strip()
        if title is not None:
            base = slug_base(title)
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
        previous = line
    return found


def masked_lines(text):
    """(line number, line) outside fenced blocks, with code spans blanked out; a code
    span may run over lines of its paragraph, never past a blank line."""
    kept = dict(lines_outside_code(text))
    total = len(text.splitlines())
    lines = [kept.get(n, "") for n in range(1, total + 1)]
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))
    paragraphs = re.split(r"(\n[ \t]*\n)", "\n".join(lines))
    masked = "".join(CODE_SPAN.sub(blank, p) for p in paragraphs).split("\n")
    for n in range(1, total + 1):
        if n in kept:
            yield n, masked[n - 1]


def links(text):
    """(line number, target) of every link outside code blocks and code spans."""
    for n, bare in masked_lines(text):
        m = REFERENCE_DEF.match(bare)
        if m:
            yield n, m.group(1)
        for m in INLINE_LINK.finditer(bare):
            yield n, m.group(1)


def check_file(path, root, cache):
    """The broken links of one file, as `path:line: target: why` lines."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    problems = []
    here = os.path.dirname(path)
    for n, target in links(text):
        target = target.strip("<>")
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(here, unquote(file_part))) if file_part else path
        where = f"{os.path.relpath(path, root)}:{n}: {target}"
        if file_part.startswith("/"):
            problems.append(f"{where}: an absolute path; link relative to the file")
            continue
        if not os.path.exists(dest):
            problems.append(f"{where}: {os.path.relpath(dest, root)} does not exist")
            continue
        if not anchor:
            continue
        if not dest.endswith(".md") or os.path.isdir(dest):
            if not LINE_ANCHOR.match(anchor):
                problems.append(f"{where}: #{anchor} points into a file that is not Markdown")
            continue
        if dest not in cache:
            with open(dest, encoding="utf-8") as f:
                cache[dest] = anchors(f.read())
        if unquote(anchor) not in cache[dest]:
            problems.append(f"{where}: {os.path.relpath(dest, root)} has no heading with the anchor #{anchor}")
    return problems


def default_files(root):
    names = [os.path.join(root, "README.md"), os.path.join(root, "ARCHITECTURE.md")]
    names += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    return [n for n in names if os.path.exists(n)]


def check(files, root):
    problems, cache = [], {}
    for path in files:
        problems += check_file(os.path.abspath(path), root, cache)
    return problems


def self_test():
    cases = 0

    def expect(got, want, what):
        nonlocal cases
        cases += 1
        if got != want:
            sys.exit(f"doc_links self-test: {what}: got {got!r}, expected {want!r}")

    expect(slug_base("Overrides: `--set`"), "overrides---set", "code span and colon")
    expect(slug_base("Metrics (`RUN/metrics.jsonl`)"), "metrics-runmetricsjsonl", "slash and dot")
    expect(slug_base("9. Output that cannot be written never panics"),
           "9-output-that-cannot-be-written-never-panics", "a numbered heading")
    expect(slug_base("Sweeps: arms × seeds, paired"), "sweeps-arms--seeds-paired", "a symbol")
    expect(slug_base("The `math/solver` (agent)"), "the-mathsolver-agent", "code in a heading")
    expect(slug_base("**Bold** and [a link](x.md)"), "bold-and-a-link", "emphasis and link")
    expect(slug_base("Über_große Zahl"), "über_große-zahl", "letters beyond ASCII and _")
    doc = "# Title\n\n## Part\n\n## Part\n\n```sh\n# not a heading\n```\n\nSetext\n------\n\n<a id=\"here\"></a>\n"
    expect(anchors(doc), {"title", "part", "part-1", "setext", "here"}, "anchors of a file")
    text = ("[a](x.md) `[no](code.md)` ![img](i.png \"t\")\n"
            "```\n[no](fenced.md)\n```\n[ref]: <y.md#z>\n[p](f(1).md) `a span\n"
            "[no](over-lines.md)` [c](c.md)\n")
    expect(list(links(text)), [(1, "x.md"), (1, "i.png"), (5, "<y.md#z>"), (6, "f(1).md"),
                               (7, "c.md")],
           "links outside code, with titles, references, parentheses")
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "docs", "b.md"), "w") as f:
            f.write("# B\n\n## The normalizers (`norms/*`)\n")
        with open(os.path.join(root, "code.rs"), "w") as f:
            f.write("fn main() {}\n")
        a = os.path.join(root, "README.md")
        with open(a, "w") as f:
            f.write("# A\n\n## Start here\n\n"
                    "[ok](docs/b.md#the-normalizers-norms) [ok](#start-here) [ok](docs/)\n"
                    "[ok](code.rs#L1) [ok](https://example.org/none.md#x) [ok](docs/b.md)\n"
                    "[bad](docs/c.md) [bad](docs/b.md#nope) [bad](#nowhere)\n"
                    "[bad](code.rs#main) [bad](/docs/b.md)\n")
        got = [p.split(": ", 1)[0] + ": " + p.split(": ", 2)[1] for p in check([a], root)]
        expect(got, ["README.md:7: docs/c.md", "README.md:7: docs/b.md#nope",
                     "README.md:7: #nowhere", "README.md:8: code.rs#main",
                     "README.md:8: /docs/b.md"], "broken links found, good ones passed")
        expect(default_files(root), [a, os.path.join(root, "docs", "b.md")], "the default files")
    print(f"doc_links self-test: {cases} cases passed")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files = argv[1:] or default_files(root)
    problems = check(files, root)
    for p in problems:
        print(p)
    sys.stdout.flush()
    if problems:
        print(f"doc_links: {len(problems)} broken link(s) in {len(files)} file(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
