"""An HDF5 shard is read only from its own bytes: external and soft links, external raw storage,
virtual layouts and filter plugins are refused wherever a shard opens (reader, verify, re-shard),
and chunks cannot be memory bombs."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import h5py
import numpy as np
import pytest

import shardkit
from shardkit.errors import CorruptShardError
from tests.faults.crafting import reseal
from tests.faults.helpers import cli_env
from tests.security.crafted import one_image_dataset

HERE = Path(__file__).resolve().parent


def crafted(tmp_path: Path, change: Callable[[h5py.File, Path], None]) -> Path:
    """A one-image HDF5 dataset whose shard was changed in place and the manifest resealed."""
    dst = one_image_dataset(tmp_path, "hdf5")
    with h5py.File(dst / "shards" / "shard-00000.h5", "r+") as handle:
        change(handle, dst)
    reseal(dst)
    return dst


def external_link(handle: h5py.File, dst: Path) -> None:
    with h5py.File(dst / "side.h5", "w") as side:
        side["labels"] = handle["labels"][()]
    del handle["labels"]
    handle["labels"] = h5py.ExternalLink(str(dst / "side.h5"), "/labels")


def soft_link(handle: h5py.File, dst: Path) -> None:
    handle["hidden"] = handle["crc32"][()]
    del handle["crc32"]
    handle["crc32"] = h5py.SoftLink("/hidden")


def external_storage(handle: h5py.File, dst: Path) -> None:
    data = handle["data"][()]
    outside = dst / "outside.bin"
    outside.write_bytes(data.tobytes())
    del handle["data"]
    handle.create_dataset("data", shape=data.shape, dtype=np.uint8, external=[(str(outside), 0, data.size)])


def virtual_layout(handle: h5py.File, dst: Path) -> None:
    data = handle["data"][()]
    with h5py.File(dst / "side.h5", "w") as side:
        side["data"] = data
    layout = h5py.VirtualLayout(shape=data.shape, dtype=np.uint8)
    layout[:] = h5py.VirtualSource(str(dst / "side.h5"), "data", shape=data.shape)
    del handle["data"]
    handle.create_virtual_dataset("data", layout)


CASES = {"external_link": (external_link, "ExternalLink"), "soft_link": (soft_link, "SoftLink"),
         "external_storage": (external_storage, "external files"), "virtual_layout": (virtual_layout, "virtual")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_data_from_outside_the_shard_is_refused(tmp_path: Path, case: str) -> None:
    change, reason = CASES[case]
    dst = crafted(tmp_path, change)
    for mode in ("quick", "full", "deep"):
        report = shardkit.verify(str(dst), mode=mode)
        assert [problem.kind for problem in report.problems] == ["structure"], (mode, report.problems)
        assert reason in report.problems[0].message and "shard-00000.h5" in report.problems[0].message
    with pytest.raises(CorruptShardError, match=f"unsafe HDF5 shard.*{reason}"):
        shardkit.open_dataset(dst)[0]
    with pytest.raises(shardkit.ShardkitError):     # the re-shard source opens shards the same way
        shardkit.convert(str(dst), str(tmp_path / "copy"), format="pt", quiet=True, on_error="fail")


def filter_plugin_shard(tmp_path: Path) -> Path:
    """A shard whose /data names filter 32001 (no built-in filter) with one chunk stored 'filtered'."""
    def change(handle: h5py.File, dst: Path) -> None:
        size = handle["data"].shape[0]
        del handle["data"]
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((size,))
        dcpl.set_filter(32001, h5py.h5z.FLAG_OPTIONAL, ())
        space = h5py.h5s.create_simple((size,))
        dset = h5py.Dataset(h5py.h5d.create(handle.id, b"data", h5py.h5t.py_create(np.dtype("u1")), space,
                                            dcpl=dcpl))
        dset.id.write_direct_chunk((0,), b"x" * max(1, size // 2), filter_mask=0)
    return crafted(tmp_path, change)


READ_ALL = ("import sys, shardkit\nreport = shardkit.verify(sys.argv[1], mode='deep')\n"
            "print([p.message for p in report.problems])\ntry:\n    shardkit.open_dataset(sys.argv[1])[0]\n"
            "except shardkit.ShardkitError as exc:\n    print(exc)\n    sys.exit(3)\n")


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the fake plugin")
def test_no_filter_plugin_is_loaded(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(plugins / "libfake.so"), str(HERE / "fake_plugin.c")],
                   check=True)
    dst = filter_plugin_shard(tmp_path)
    marker = tmp_path / "plugin-loaded"
    env = cli_env({"HDF5_PLUGIN_PATH": str(plugins), "SHARDKIT_PLUGIN_MARKER": str(marker)})
    result = subprocess.run([sys.executable, "-c", READ_ALL, str(dst)], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "filter pipeline [32001]" in result.stdout
    assert not marker.exists(), "a filter plugin library was loaded"
