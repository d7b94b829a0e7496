"""Every relative link in README.md, docs/ and benchmarks/README.md reaches a file of the repository, and
every ``#anchor`` into a Markdown page names one of its headings (GitHub's slugs)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def pages(repo: Path = REPO) -> list[Path]:
    """The pages whose links are checked: the front page, the docs and the benchmarks' catalogue."""
    return [repo / "README.md", repo / "benchmarks" / "README.md", *sorted((repo / "docs").rglob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (hyphens and underscores kept),
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page: its headings' (outside code fences; a repeated heading gets -1,
    -2, ...) and each ``<a id="...">``."""
    text = FENCE.sub("", page.read_text())
    seen: dict[str, int] = {}
    found = set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text))
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, flags=re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def broken_links(page: Path, repo: Path = REPO) -> list[str]:
    """``page: target (why)`` for each relative link of ``page`` that leads nowhere."""
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text()))
    problems = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # an absolute URL (https:, mailto:): outside the repository
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(repo)}: {target}"
        if not dest.exists():
            problems.append(f"{where} (no such file)")
        elif not dest.resolve().is_relative_to(repo.resolve()):
            problems.append(f"{where} (outside the repository)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where} (no heading #{anchor} in {dest.relative_to(repo.resolve())})")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_a_missing_file_or_heading_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Overrides, `--help` and `--cfg job`\n\n"
                                            "```\n# not a heading\n[x](nowhere.md)\n```\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/a.md#overrides---help-and---cfg-job) [gone](docs/b.md) [web](https://x.org/y.md)\n"
                    "[bad anchor](docs/a.md#not-a-heading) `[code](nowhere.md)` [self](#title) [id](#here)\n"
                    "# Title\n<a id=\"here\"></a>\n")
    assert broken_links(page, tmp_path) == ["README.md: docs/b.md (no such file)",
                                            "README.md: docs/a.md#not-a-heading (no heading #not-a-heading in docs/a.md)"]
