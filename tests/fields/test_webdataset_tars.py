"""convert --sidecars of archives: a WebDataset tar (members sharing a key are one sample), the
same as tar.gz and zip, and a tar of WebDataset shard tars, each converting to the shards of the
unpacked tree; unsafe members are skipped and listed, never read."""
from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path
from typing import Dict

import pytest

import shardkit

from .test_sources import sidecar_tree

OPTIONS = {"sidecars": True, "label_field": "cls", "samples_per_shard": 4, "seed": 3}


def shard_files(dst: Path) -> Dict[str, bytes]:
    """Every shard file of a dataset by name: what a conversion wrote, its source record aside."""
    return {path.name: path.read_bytes() for path in sorted((dst / "shards").rglob("*")) if path.is_file()}


def pack(src: Path, archive: Path) -> Path:
    """The files below src in an archive (tar, tar.gz or zip by its name), in sorted order."""
    files = sorted(path for path in src.rglob("*") if path.is_file())
    if archive.name.endswith(".zip"):
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
            for path in files:
                out.write(path, path.relative_to(src).as_posix())
    else:
        with tarfile.open(archive, "w:gz" if archive.name.endswith(".gz") else "w") as out:
            for path in files:
                out.add(path, path.relative_to(src).as_posix())
    return archive


@pytest.mark.parametrize("name", ["train.tar", "train.tar.gz", "train.zip"])
def test_an_archive_converts_to_the_shards_of_its_unpacked_tree(tmp_path: Path, name: str) -> None:
    """Mutation: MemberFiles.read_many answering in listing order instead of the order asked
    gives samples other files' values (the shards then differ)."""
    files = sidecar_tree(tmp_path / "src", 11)
    shardkit.convert(str(tmp_path / "src"), str(tmp_path / "tree"), **OPTIONS)
    report = shardkit.convert(str(pack(tmp_path / "src", tmp_path / name)), str(tmp_path / "archive"), **OPTIONS)
    assert report.num_samples == len(files) == 11
    assert shard_files(tmp_path / "archive") == shard_files(tmp_path / "tree")
    ds = shardkit.open_dataset(tmp_path / "archive", decode=None)
    for index in range(len(ds)):
        assert ds[index]["png"] == files[ds.key(index)]["png"]
    assert ds.manifest.source["path"].endswith(name)
    assert shardkit.verify(str(tmp_path / "archive"), mode="deep").ok


def test_a_tar_of_webdataset_shard_tars_is_one_dataset(tmp_path: Path) -> None:
    """WebDataset shards (flat tars of 0000.png, 0000.txt, ...) packed in one tar: each inner
    tar is a folder, so keys are "shard-N/0000" and every sample keeps its own files."""
    inner: Dict[str, Dict[str, bytes]] = {}
    outer = tmp_path / "shards.tar"
    with tarfile.open(outer, "w") as out:
        for shard in range(2):
            files = sidecar_tree(tmp_path / f"s{shard}", 5 + shard)
            flat = io.BytesIO()
            with tarfile.open(fileobj=flat, mode="w") as tar:
                for key, values in sorted(files.items()):
                    for ext, data in sorted(values.items()):
                        info = tarfile.TarInfo(f"{key.replace('/', '_')}.{ext}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
                        inner.setdefault(f"shard-{shard}/{key.replace('/', '_')}", {})[ext] = data
            info = tarfile.TarInfo(f"shard-{shard}.tar")
            info.size = len(flat.getvalue())
            out.addfile(info, io.BytesIO(flat.getvalue()))
    report = shardkit.convert(str(outer), str(tmp_path / "ds"), **OPTIONS)
    assert report.num_samples == 11 and report.skipped == 0
    ds = shardkit.open_dataset(tmp_path / "ds", decode=None)
    assert sorted(ds.key(i) for i in range(len(ds))) == sorted(inner)
    for index in range(len(ds)):
        want = inner[ds.key(index)]
        assert ds[index]["txt"] == want["txt"] and ds[index]["png"] == want["png"]
        assert ds.classes[int(ds[index]["cls"][0])] == want["cls"].decode().strip()


def test_unsafe_members_are_listed_and_never_read(tmp_path: Path) -> None:
    """A member named with "..", an absolute one and a link are skipped inputs; the rest convert."""
    sidecar_tree(tmp_path / "src", 4)
    archive = pack(tmp_path / "src", tmp_path / "train.tar")
    with tarfile.open(archive, "a") as out:
        for name in ("../0077.txt", "/etc/0078.txt"):
            info = tarfile.TarInfo(name)
            info.size = 4
            out.addfile(info, io.BytesIO(b"evil"))
        link = tarfile.TarInfo("a/0000.json")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        out.addfile(link)
    report = shardkit.convert(str(archive), str(tmp_path / "ds"), **OPTIONS)
    assert report.num_samples == 4
    skipped = [json.loads(line)["path"] for line in (tmp_path / "ds" / "skipped.jsonl").read_text().splitlines()]
    assert any(".." in path for path in skipped) and any("0078" in path for path in skipped)
    assert any(path.endswith("0000.json") for path in skipped)
    ds = shardkit.open_dataset(tmp_path / "ds", decode=None)
    assert all(b"evil" not in (ds[i]["txt"] or b"") for i in range(len(ds)))
    assert os.path.exists(tmp_path / "ds" / "manifest.json")
