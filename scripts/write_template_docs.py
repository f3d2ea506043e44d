"""Rewrite the template blocks of docs/adding-a-variant.md from tests/templates/ (tests/kernels/test_templates.py holds
them equal, so the page can never drift from the templates the tests run).

    .venv/bin/python scripts/write_template_docs.py
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "adding-a-variant.md"
TEMPLATES = ROOT / "tests" / "templates"
# <!-- template: NAME --> then one fenced block, replaced by the file's text
BLOCK = re.compile(r"(<!-- template: (?P<name>[\w.]+) -->\n)```(?P<lang>\w*)\n(?:.*?\n)??```", re.S)


def rendered(text: str) -> str:
    def fill(match):
        name = match["name"]
        body = (TEMPLATES / name).read_text().rstrip("\n")
        return f"{match[1]}```{match['lang']}\n{body}\n```"
    return BLOCK.sub(fill, text)


def main() -> int:
    text = DOC.read_text()
    new = rendered(text)
    if new != text:
        DOC.write_text(new)
        print(f"rewrote the template blocks of {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
