"""The local file system needs no extra: converting, verifying and reading a local dataset (and
loading the CLI) never imports fsspec; without the extra, a URL gets one line saying what to install."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import table_dataset

LOCAL_WORK = """
import sys, shardkit
from shardkit.cli import main
shardkit.convert({src!r}, {dst!r}, label_column="label", samples_per_shard=5, quiet=True, workers=1)
assert shardkit.verify({dst!r}).ok
with shardkit.open_dataset({dst!r}) as ds:
    ds[3]
print(sorted(name for name in ("fsspec", "s3fs", "gcsfs", "aiohttp") if name in sys.modules))
"""

WITHOUT_FSSPEC = """
import sys
sys.modules["fsspec"] = None     # as if the extra were not installed
import shardkit
try:
    shardkit.pull("s3://bucket/ds", {dst!r})
except shardkit.UsageError as exc:
    print(exc)
"""


def test_local_work_imports_no_remote_library(tmp_path: Path) -> None:
    table_dataset(tmp_path, shards=1)
    code = LOCAL_WORK.format(src=str(tmp_path / "table.csv"), dst=str(tmp_path / "local"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_url_without_the_extra_says_what_to_install(tmp_path: Path) -> None:
    code = WITHOUT_FSSPEC.format(dst=str(tmp_path / "dst"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "s3://bucket/ds: object storage needs the remote extra: pip install 'shardkit[remote]'"
    assert not (tmp_path / "dst").exists()


LOCAL_ARCHIVE = """
import sys, tarfile, shardkit
from shardkit.samples import make_image_tree
make_image_tree({tree!r}, num_images=4, classes=("a", "b"), seed=0, sizes=(8, 8))
with tarfile.open({archive!r}, "w:gz") as tar:
    tar.add({tree!r}, arcname=".")
shardkit.convert({archive!r}, {dst!r}, quiet=True, workers=1)
print(sorted(name for name in ("fsspec", "s3fs", "gcsfs", "aiohttp") if name in sys.modules))
"""


def test_a_local_archive_needs_no_remote_library(tmp_path: Path) -> None:
    code = LOCAL_ARCHIVE.format(tree=str(tmp_path / "tree"), archive=str(tmp_path / "tree.tgz"),
                                dst=str(tmp_path / "dst"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert (tmp_path / "dst" / "manifest.json").is_file()
