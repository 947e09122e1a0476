"""Many shards under a small descriptor limit: random reads from 2 workers never run out of descriptors."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import shardkit

#: hundreds of shards read in child processes: slow (-m "not slow" leaves them out; CI runs them)
pytestmark = pytest.mark.slow

SHARDS = 300
LIMIT = 100      # descriptors, soft and hard, in the reading process: far fewer than the shards

READER = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))
import torch.utils.data
import shardkit
from shardkit.read.budget import default_max_open_shards

ds = shardkit.open_dataset(sys.argv[1], decode=None)
opened = ds.open_shards() if sys.argv[2] == "open_shards" else 0     # the workers inherit these
loader = torch.utils.data.DataLoader(
    ds, batch_size=64, num_workers=2, collate_fn=lambda batch: [(bytes(memoryview(p)), l) for p, l in batch],
    sampler=torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(0)))
seen = sorted(sample for batch in loader for sample in batch)
single = sorted((bytes(memoryview(ds[i][0])), ds[i][1]) for i in torch.randperm(len(ds)).tolist())
print(json.dumps({{"budget": ds.max_open_shards, "default": default_max_open_shards(), "opened": opened,
                  "seen": [[p.hex(), l] for p, l in seen], "single": [[p.hex(), l] for p, l in single]}}))
"""


@pytest.fixture(scope="module")
def rows_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rows") / "rows.csv"
    path.write_text("a,b,label\n" + "".join(f"{i},{i * 0.5},c{i % 3}\n" for i in range(SHARDS * 2)))
    return path


@pytest.fixture(scope="module")
def _many_cache(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return {"root": tmp_path_factory.mktemp("many")}


@pytest.fixture
def many(_many_cache: dict, rows_csv: Path, fmt: str) -> Path:
    """rows_csv converted once per format, 2 rows a shard (SHARDS shards), for the tests that only read it."""
    dst = _many_cache["root"] / fmt
    if not (dst / "manifest.json").exists():
        shardkit.convert(str(rows_csv), str(dst), format=fmt, label_column="label", samples_per_shard=2, quiet=True)
    return dst


@pytest.mark.parametrize("parent", ["lazy", "open_shards"])
def test_random_reads_over_many_shards_stay_within_the_descriptor_limit(many: Path, parent: str) -> None:
    """Under open_shards the parent holds its whole budget when it forks the workers, who keep
    those readers (map-only formats) and open the rest within the same limit."""
    with shardkit.open_dataset(many, decode=None) as ds:
        assert len(ds.manifest.shards) == SHARDS
        expected = sorted([bytes(memoryview(ds[i][0])).hex(), ds[i][1]] for i in range(len(ds)))
    out = subprocess.run([sys.executable, "-c", READER.format(limit=LIMIT), str(many), parent], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["budget"] == got["default"] < LIMIT
    assert got["opened"] == (got["budget"] if parent == "open_shards" else 0)
    assert got["seen"] == expected            # every sample exactly once, through 2 workers
    assert got["single"] == expected          # and one by one in the main process


TWO_DATASETS = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))
import numpy as np
import shardkit

first, second = (shardkit.open_dataset(path, decode=None) for path in sys.argv[1:3])
order = np.random.default_rng(0).permutation(2 * len(first)).tolist()
got = [(ds[i % len(ds)][1]) for i in order for ds in [first if i < len(first) else second]]
print(json.dumps({{"budgets": [first.max_open_shards, second.max_open_shards], "labels": got,
                  "order": order}}))
"""


def test_two_datasets_in_one_process_share_its_descriptor_limit(tmp_path: Path, fmt: str) -> None:
    """Each dataset's own budget fits the limit, the two together would not: the process's open
    shard files stay within it, whoever holds them."""
    limit, shards = 520, 280      # each budget is 520 - 256 = 264 (< 280), both together 528 (> 520)
    csv = tmp_path / "rows.csv"
    csv.write_text("a,label\n" + "".join(f"{i},c{i % 5}\n" for i in range(shards)))
    paths = [str(tmp_path / "first"), str(tmp_path / "second")]
    shardkit.convert(str(csv), paths[0], format=fmt, label_column="label", samples_per_shard=1, quiet=True)
    shutil.copytree(paths[0], paths[1])         # the same rows in other files: a second set of shards
    out = subprocess.run([sys.executable, "-c", TWO_DATASETS.format(limit=limit), *paths], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["budgets"] == [limit - 256] * 2
    classes = sorted(f"c{i}" for i in range(5))
    expected = [classes.index(f"c{(i % shards) % 5}") for i in got["order"]]
    assert got["labels"] == expected


ALL_READY = r"""
import json, os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))
import shardkit

ds = shardkit.open_dataset(sys.argv[1], decode=None)
for _ in range(2):
    for i in range(len(ds)):
        ds[i]
info = ds.shard_cache.info()      # rows located in their files: in the row arena, no reader
print(json.dumps({{"budget": ds.max_open_shards, "open": len(set(info.open) | set(info.placed)),
                  "descriptors": len(os.listdir("/proc/self/fd"))}}))
"""


def test_a_dataset_within_its_budget_keeps_every_shard_open(many: Path) -> None:
    """300 shards under a budget of 344 all stay open (rows located in their files go to the row
    arena, which holds no descriptor and no reader)."""
    limit = 600
    out = subprocess.run([sys.executable, "-c", ALL_READY.format(limit=limit), str(many)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["budget"] == limit - 256 > SHARDS
    assert got["open"] == SHARDS
    assert got["descriptors"] <= SHARDS + 64      # one per shard at most, and a few of the interpreter's


EXHAUSTED = r"""
import os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
import shardkit
ds = shardkit.open_dataset(sys.argv[1], decode=None)
spent = []
while True:                      # the process spends its descriptors elsewhere
    try:
        spent.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        break
try:
    ds[0]
except shardkit.CorruptShardError as exc:
    print("corrupt", exc)
except shardkit.OutOfFilesError as exc:
    print("out", exc)
"""


def test_a_process_out_of_descriptors_is_told_so_not_that_a_shard_is_damaged(
        rows_csv: Path, tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / "few"
    shardkit.convert(str(rows_csv), str(dst), format=fmt, label_column="label", samples_per_shard=100, quiet=True)
    out = subprocess.run([sys.executable, "-c", EXHAUSTED, str(dst)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("out ") and "shard-00000" in out.stdout and "ulimit -n" in out.stdout, out.stdout
