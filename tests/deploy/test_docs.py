"""The docs stand on their own: every link in them leads to a file of this
repository, and nothing refers to files outside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / line for line in listed.stdout.splitlines() if (ROOT / line).is_file()]


@pytest.mark.parametrize("doc", tracked("*.md"), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_to_a_file_here(doc: Path) -> None:
    for target in LINK.findall(doc.read_text()):
        if target.startswith(("http://", "https://", "#", "mailto:")):
            continue
        resolved = (doc.parent / target.split("#")[0]).resolve()
        assert resolved.is_relative_to(ROOT), f"{target} leads out of the repository"
        assert resolved.exists(), f"{target} does not exist"


def test_nothing_refers_to_files_outside_the_repository() -> None:
    outside = re.compile(r"\.\./shared|DESIGN\.md")
    offenders = [str(p.relative_to(ROOT)) for p in tracked("*.py", "*.md", "*.yaml", "*.yml", "*.toml")
                 if p.name != "test_docs.py" and outside.search(p.read_text(errors="replace"))]
    assert offenders == []
