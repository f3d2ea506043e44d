"""The README stays a screen's worth of truth: short, its links and make targets real, nothing outside the repo."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_BYTES = 12 * 1024  # the newcomer issue's bar: about 12 KB, the rest lives in docs/
OUTSIDE = (os.path.join("..", "shared"), "/work/")  # the folders beside a developer's checkout


def _markdown_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_is_about_12_kb_or_less():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes, over {README_MAX_BYTES}: move detail into docs/"


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path):
    """Every [text](target) that is not a URL or an anchor names a file or folder inside the repository."""
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+://", target) or target.startswith(("#", "mailto:")):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() or not path.is_relative_to(ROOT):
            missing.append(target)
    assert not missing, f"{page.name} links to files that do not exist: {missing}"


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_docs_stay_inside_the_repository(page: Path):
    """Users have the repository only: no page names the workplace's folders beside it."""
    text = page.read_text()
    outside = [name for name in OUTSIDE if name in text]
    assert not outside, f"{page.name} points outside the repository: {outside}"


def test_make_targets_the_readme_names_exist():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, flags=re.MULTILINE))
    named = set(re.findall(r"`make ([a-z][\w-]*)", README.read_text()))
    assert named, "the README names no make target"
    assert named <= targets, f"README names make targets the Makefile lacks: {sorted(named - targets)}"
