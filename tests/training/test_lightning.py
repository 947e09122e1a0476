"""Lightning DDP on 2 CPU processes: the sampler is used as it is, the ranks together read the epoch
exactly once, and Lightning's worker seeding stays on (no worker_init_fn is needed)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import shardkit

# Lightning runs only in the child process: importing it here (1.5 s of torch._dynamo) would cost
# every collecting process that time for nothing.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning is not installed")
SCRIPT = Path(__file__).resolve().parent / "lightning_run.py"


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_lightning_ddp_reads_the_epoch_once(dataset_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "seen"
    done = subprocess.run([sys.executable, str(SCRIPT), str(dataset_dir), str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"seen.{rank}.json").read_text()) for rank in range(2)]
    assert all(rank["sampler"] == "ShardAwareSampler" and rank["world"] == 2 for rank in ranks)
    assert all(rank["worker_init_fn"] for rank in ranks)         # Lightning seeded the workers
    ds = shardkit.open_dataset(dataset_dir, decode=None)
    every = sorted(zlib.crc32(bytes(memoryview(ds[i][0]))) for i in range(len(ds)))
    assert len(ranks[0]["seen"]) == len(ranks[1]["seen"]) == len(ds) // 2
    assert sorted(ranks[0]["seen"] + ranks[1]["seen"]) == every
