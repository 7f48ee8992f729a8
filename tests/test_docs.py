"""The user pages keep their promises: included results tables equal the report's files, links
resolve, the README stays short, and no page talks about how the project was made.

Pure file checks, no Ray. ``python tests/test_docs.py --update`` rewrites every included block
from its file (run it after regenerating a report).

An include is written in a page as::

    <!-- include: docs/results/table.md#table -->
    ...the file's content, or with ``#table`` only its first markdown table (``#table-2``: its
    second)...
    <!-- end include -->

The path is relative to the repository root.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_BYTES = 8192

INCLUDE = re.compile(
    r"(<!-- include: (?P<path>[^#\s]+)(?:#(?P<part>table(?:-[1-9]\d*)?))? -->\n)"
    r"(?P<body>.*?)(<!-- end include -->)",
    re.DOTALL,
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
PROCESS_WORDS = re.compile(r"this stop|this session|renamed|commit [0-9a-f]{7}|/work/|/tmp/", re.IGNORECASE)
# A bare commit hash: 7-40 hex digits, with at least one digit and one letter (so that neither
# plain numbers nor words such as "defaced" count).
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def user_pages() -> list[Path]:
    """README, every markdown page under docs/, CONTRIBUTING.md and CHANGELOG.md."""
    pages = [README, ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if p.exists()]


def product_texts() -> list[Path]:
    """Everything a user reads: the pages, the tuned examples (their headers) and the Makefile."""
    return user_pages() + sorted((ROOT / "tuned_examples").glob("*.yaml")) + [ROOT / "Makefile"]


def nth_table(text: str, n: int = 1) -> str:
    """The ``n``-th markdown table of ``text`` (from 1): consecutive lines that start with '|'."""
    tables = re.findall(r"(?m)(?:^\|.*\n?)+", text)
    return tables[n - 1] if len(tables) >= n else ""


def included_text(path: str, part: str | None) -> str:
    """What an include of ``path`` (relative to the repository root) must contain."""
    text = (ROOT / path).read_text(encoding="utf-8")
    if part is None:
        return text
    return nth_table(text, int(part.removeprefix("table").removeprefix("-") or 1))


def includes(page: Path) -> list[re.Match]:
    return list(INCLUDE.finditer(page.read_text(encoding="utf-8")))


def update(page: Path) -> bool:
    """Rewrite every included block of ``page`` from its file; True if the page changed."""
    text = page.read_text(encoding="utf-8")
    new = INCLUDE.sub(lambda m: m.group(1) + included_text(m["path"], m["part"]) + m.group(5), text)
    if new != text:
        page.write_text(new, encoding="utf-8")
    return new != text


def relative_links(page: Path) -> list[str]:
    """The page's link targets that point into the repository (no URL, no bare anchor)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_included_blocks_equal_their_files(page):
    for match in includes(page):
        assert (ROOT / match["path"]).is_file(), f"{page.name}: include of a missing file {match['path']}"
        assert match["body"] == included_text(match["path"], match["part"]), (
            f"{page.name}: the block included from {match['path']} differs from the file; "
            "run `python tests/test_docs.py --update`"
        )


def test_pages_with_results_include_the_report_tables():
    assert {m["path"] for m in includes(README)} == {"docs/results/table1/gains.md"}
    assert "docs/results/wallclock/table.md" in {m["path"] for m in includes(ROOT / "docs/speed.md")}


def test_readme_is_at_most_8_kb():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail into docs/"


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    headings = re.findall(r"(?m)^#+ (.*)$", text)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    for target in relative_links(page) + [
        page.name + t for t in LINK.findall(page.read_text(encoding="utf-8")) if t.startswith("#")
    ]:
        path, _, anchor = target.partition("#")
        assert (page.parent / path).exists(), f"{page.relative_to(ROOT)}: broken link {target}"
        if anchor and path.endswith(".md"):
            assert anchor in anchors(page.parent / path), f"{page.relative_to(ROOT)}: no heading for {target}"


@pytest.mark.parametrize("path", product_texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_words_about_how_the_project_was_made(path):
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        found = PROCESS_WORDS.search(line) or COMMIT_HASH.search(line)
        assert not found, f"{path.relative_to(ROOT)}:{number}: {found.group(0)!r} in {line.strip()!r}"


#: A path in the repository that a page names: the package's modules, the tests, the benchmarks.
REPO_PATH = re.compile(r"\b((?:rllib_geppo|tests|benchmarks)/[\w/]+\.(?:py|sh))\b")


@pytest.mark.parametrize(
    "page",
    [p for p in user_pages() if p.name != "CHANGELOG.md"],  # history
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_file_a_page_names_exists(page):
    for path in REPO_PATH.findall(page.read_text(encoding="utf-8")):
        assert (ROOT / path).exists(), f"{page.relative_to(ROOT)} names {path}, which does not exist"


#: Figures that more than one page quotes: (what, a pattern whose first group is the value, the
#: page that holds the measurement). Every value any page quotes must appear on its home page.
QUOTED_FIGURES = [
    ("the suite's time", r"(?:suite|`make test`) takes about (\d+) min", "CONTRIBUTING.md"),
    (
        "a speed against SB3 PPO's",
        r"(\d\.\d+x)(?: to \d\.\d+x)? SB3 PPO(?:'s)? (?:env steps|here|\()",
        "docs/speed.md",
    ),
]


def quoted_figures(pattern: str) -> list[tuple[Path, str]]:
    return [
        (page, match.group(1))
        for page in product_texts()
        for match in re.finditer(pattern, page.read_text(encoding="utf-8"))
    ]


@pytest.mark.parametrize("what,pattern,home", QUOTED_FIGURES, ids=[f[0] for f in QUOTED_FIGURES])
def test_a_figure_quoted_in_two_places_agrees_with_its_page(what, pattern, home):
    home_text = (ROOT / home).read_text(encoding="utf-8")
    assert quoted_figures(pattern), f"no page quotes {what} any more: drop its entry"
    for page, value in quoted_figures(pattern):
        assert value in home_text, (
            f"{page.relative_to(ROOT)} quotes {what} as {value}, which {home} does not give"
        )


def test_checks_catch_what_they_should():
    """The checks themselves: a hash, a machine path and a stale table are found."""
    assert COMMIT_HASH.search("measured on 54e171f") and COMMIT_HASH.search("a4b7bb0")
    assert not COMMIT_HASH.search("1000000 steps, seed 1e-5, defaced")
    assert PROCESS_WORDS.search("see /work/main/runs") and PROCESS_WORDS.search("commit abcdef1")
    table = "| a | b |\n| --- | --- |\n| 1 | 2 |\n"
    text = "# t\n\ntext\n\n" + table + "\nmore\n| x |\n"
    assert nth_table(text) == table and nth_table(text, 2) == "| x |\n" and nth_table(text, 3) == ""
    assert relative_links(README), "README.md links to no docs page"
    assert "the-clip-range-keep-synchronous-geppos-lag_clip_rule" in anchors(
        ROOT / "docs/overlapped_sampling.md"
    )
    assert re.search(QUOTED_FIGURES[0][1], "`make test` takes about 9 minutes").group(1) == "9"
    assert re.search(QUOTED_FIGURES[1][1], "at 2.05x SB3 PPO's env steps/s").group(1) == "2.05x"


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_docs.py --update")
    for page in user_pages():
        if update(page):
            print(f"updated {page.relative_to(ROOT)}")
