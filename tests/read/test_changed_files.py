"""Shard files changed while a dataset has them open (read/watch.py): a shard truncated under its
map would end the process with SIGBUS at the next touch of a page past its end; instead the next
batch sets it aside and opens it again, which names it. A shard replaced by rename is opened again
with every check. verify_checksums="full" reads a private copy of what it hashed, whatever happens
to the file."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shardkit

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")

TRUNCATE = r"""
import os, sys
import numpy as np
import torch.utils.data
import shardkit

def collate(batch):
    return [np.asarray(payload).tobytes() for payload, _ in batch]

dst, shard = sys.argv[1], sys.argv[2]
with shardkit.open_dataset(dst, decode=None) as ds:
    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=1, persistent_workers=True,
                                         collate_fn=collate)
    everything = list(range(len(ds)))
    first = ds.__getitems__(everything)         # every shard open and mapped here, and in the worker
    epoch = list(loader)
    stream = shardkit.ShardStream(dst, decode=None, shuffle=False)
    list(stream)
    os.truncate(shard, os.path.getsize(shard) // 2)
    for name, read in (("main", lambda: ds.__getitems__(everything)), ("worker", lambda: list(loader)),
                       ("stream", lambda: list(stream))):
        try:
            read()
            print(name, "read")
        except shardkit.CorruptShardError as exc:
            print(name, "refused", "shard-00002" in str(exc))
"""


@pytest.mark.parametrize("kind", ["rows_dataset", "images_dataset"])
def test_a_shard_truncated_while_open_is_named_not_a_dead_process(request: pytest.FixtureRequest, fmt: str,
                                                                  kind: str) -> None:
    dst = request.getfixturevalue(kind)
    shard = dst / shardkit.open_dataset(dst).manifest.shards[2].path
    out = subprocess.run([sys.executable, "-c", TRUNCATE, str(dst), str(shard)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.split("\n")[:3] == ["main refused True", "worker refused True", "stream refused True"], \
        out.stdout


def test_a_shard_replaced_by_rename_is_opened_again(rows_dataset: Path, tmp_path: Path, fmt: str) -> None:
    other, csv = tmp_path / "other", tmp_path / "again.csv"
    shutil.copyfile(rows_dataset.parent / "rows.csv", csv)
    shardkit.convert(str(csv), str(other), format=fmt, label_column="label", samples_per_shard=5, order="source",
                     quiet=True)
    manifest = shardkit.open_dataset(rows_dataset).manifest
    with shardkit.open_dataset(rows_dataset, decode=None) as ds:
        ds.__getitems__(list(range(len(ds))))
        (other / manifest.shards[2].path).replace(rows_dataset / manifest.shards[2].path)
        with pytest.raises(shardkit.ForeignShardError, match="shard-00002"):
            ds.__getitems__(list(range(len(ds))))


def test_full_checks_read_what_they_hashed_whatever_happens_to_the_file(rows_dataset: Path) -> None:
    """A byte of an open shard rewritten in place, then the shard truncated: reads under
    verify_checksums="full" go on giving the bytes whose sha256 matched, and never fault."""
    with shardkit.open_dataset(rows_dataset, decode=None, verify_checksums="full") as ds:
        before = [ds[i][0].copy() for i in range(len(ds))]
        shard = rows_dataset / ds.manifest.shards[0].path
        data = bytearray(shard.read_bytes())
        row = before[0].tobytes()
        with open(shard, "r+b") as handle:          # the same file, changed in place
            for at in [index for index in range(len(data)) if data.startswith(row, index)]:
                handle.seek(at)
                handle.write(bytes(len(row)))
            handle.truncate(len(data) // 2)
        assert all(np.array_equal(ds[i][0], row) for i, row in enumerate(before))
        assert ds.shard_cache.info().placed                 # from the private copies
