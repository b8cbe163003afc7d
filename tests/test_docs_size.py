"""The user docs stay readable: README + docs/*.md within 220 KiB, no page over 600 lines, a
README of at most 200 lines, and every relative link in them pointing at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_docs_and_readme_fit_in_220_kib() -> None:
    size = sum(len(p.read_bytes()) for p in PAGES)
    assert size <= 220 * 1024, f"README + docs are {size / 1024:.1f} KiB (at most 220)"


def test_no_page_over_600_lines_and_a_short_readme() -> None:
    long = {p.name: n for p in PAGES if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_relative_links_point_at_files() -> None:
    dead = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                dead.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not dead, dead
