"""docs/reliability.md's threat model lists every test file of tests/security/, and nothing else."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_security_test_file_is_listed() -> None:
    page = (REPO / "docs" / "reliability.md").read_text()
    section = page.split("## Threat model", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`tests/security/(test_\w+\.py)`", section))
    present = {path.name for path in (REPO / "tests" / "security").glob("test_*.py")} - {Path(__file__).name}
    assert listed == present
