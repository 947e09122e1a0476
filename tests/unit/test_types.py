"""`mypy shardkit` is clean (configured in pyproject.toml), and code using the public API gets its
real types, not Any, although `import shardkit` loads the names lazily."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

USER_CODE = '''
import shardkit

report = shardkit.convert("SRC", "DST", samples_per_shard=8)
reveal_type(report)
count: int = report.num_samples
ds = shardkit.open_dataset("DST", decode="tensor")
reveal_type(ds)
sampler = shardkit.ShardAwareSampler(ds, seed=0)
sampler.set_epoch("one")
'''


def test_mypy_is_clean_and_the_public_api_is_typed(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="the test extra installs mypy")
    user = tmp_path / "user_code.py"
    user.write_text(USER_CODE)
    done = subprocess.run([sys.executable, "-m", "mypy", "shardkit", str(user)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if ": error:" in line or ": note:" in line]
    assert not [line for line in lines if "user_code.py" not in line], done.stdout
    assert any('Revealed type is "shardkit.writing.conversion.ConvertReport"' in line for line in lines), done.stdout
    assert any('Revealed type is "shardkit.read.dataset.ShardDataset"' in line for line in lines), done.stdout
    errors = [line for line in lines if ": error:" in line]
    assert len(errors) == 1 and '"set_epoch"' in errors[0] and ":10:" in errors[0], done.stdout
