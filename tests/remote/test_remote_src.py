"""convert from a URL: image trees in a bucket, archives in a bucket or on a web server, tables at a
URL, against moto's S3 server and a misbehaving HTTP server on 127.0.0.1. The same files with the
same times give byte-identical shards wherever they lie; transient faults are retried and change
nothing; a fault that stays ends in one line naming the URL (without credentials) and leaves no
manifest; --resume notices an object changed since the run it continues."""
from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import tarfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any, Dict

import pytest

import shardkit
from shardkit.cli import main
from shardkit.samples import make_image_tree

from .servers import FaultyFolderServer, S3Server

TIME = 1_700_000_000
CONVERT = dict(samples_per_shard=4, workers=1, quiet=True, seed=3)


def _tree(root: Path, sizes: Any = (8, 24)) -> Path:
    make_image_tree(str(root), num_images=10, classes=("cat", "dog"), seed=4, sizes=sizes)
    for path in root.rglob("*"):
        os.utime(path, (TIME, TIME))
    return root


def _shards(dst: Path) -> Dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((dst / "shards").iterdir())}


def _s3fs(s3: S3Server) -> Any:
    import s3fs
    return s3fs.S3FileSystem(**s3.options())


def _error_line(args: list, capsys: pytest.CaptureFixture) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["convert", *args, "--quiet", "--workers", "1"])
    assert exited.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_tree_in_a_bucket_converts_to_the_shards_of_the_same_tree_on_disk(
        tmp_path: Path, s3: S3Server, bucket: str) -> None:
    """The local files get the objects' times (S3 keeps whole seconds); then the bytes agree."""
    tree = _tree(tmp_path / "tree")
    fs = _s3fs(s3)
    fs.put(str(tree), f"{bucket}/train", recursive=True)
    for path, info in fs.find(f"{bucket}/train", detail=True).items():
        stamp = int(info["LastModified"].timestamp())
        os.utime(tree / path[len(f"{bucket}/train/"):], (stamp, stamp))
    shardkit.convert(str(tree), str(tmp_path / "local"), **CONVERT)
    report = shardkit.convert(f"s3://{bucket}/train", str(tmp_path / "s3"), storage_options=s3.options(),
                              in_flight=3, **CONVERT)
    assert report.num_samples == 10
    assert _shards(tmp_path / "s3") == _shards(tmp_path / "local")
    manifest = json.loads((tmp_path / "s3" / "manifest.json").read_text())
    assert manifest["source"]["path"] == f"s3://{bucket}/train" and manifest["classes"] == ["cat", "dog"]


@pytest.mark.parametrize("kind", ["tar", "zip", "tar-of-tars"])
def test_an_archive_in_a_bucket_converts_to_the_shards_of_the_tree(
        tmp_path: Path, s3: S3Server, bucket: str, kind: str) -> None:
    tree = _tree(tmp_path / "tree")
    archive = _tar_of_tars(tree, tmp_path / "train.tar") if kind == "tar-of-tars" else \
        _archive(tree, tmp_path / f"train.{kind}")
    _s3fs(s3).put(str(archive), f"{bucket}/data/{archive.name}")
    shardkit.convert(str(tree), str(tmp_path / "local"), **CONVERT)
    shardkit.convert(f"s3://{bucket}/data/{archive.name}", str(tmp_path / "s3"), storage_options=s3.options(),
                     **{**CONVERT, "workers": 2})
    assert _shards(tmp_path / "s3") == _shards(tmp_path / "local")


def _tar_of_tars(tree: Path, archive: Path) -> Path:
    """One tar per class folder, inside one tar (ImageNet's train tar)."""
    for folder in sorted(tree.iterdir()):
        with tarfile.open(tree.parent / f"{folder.name}.tar", "w") as tar:
            tar.add(folder, arcname=".")
    with tarfile.open(archive, "w") as tar:
        for folder in sorted(tree.iterdir()):
            tar.add(tree.parent / f"{folder.name}.tar", arcname=f"{folder.name}.tar")
    return archive


def _archive(tree: Path, archive: Path) -> Path:
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as out:
            for path in sorted(tree.rglob("*.*")):
                out.write(path, path.relative_to(tree).as_posix())
    else:
        with tarfile.open(archive, "w") as tar:
            tar.add(tree, arcname=".")
    return archive


def test_resume_notices_an_object_changed_since_the_run(tmp_path: Path, s3: S3Server, bucket: str) -> None:
    """An object replaced by one of the same size (a later second) is another input: --resume
    refuses to call the finished dataset done. Mutation: leaving the modification time out of
    member_source's fingerprint lets --resume reuse every shard."""
    tree = _tree(tmp_path / "tree")
    fs = _s3fs(s3)
    fs.put(str(tree), f"{bucket}/train", recursive=True)
    url, options = f"s3://{bucket}/train", s3.options()
    first = shardkit.convert(url, str(tmp_path / "dst"), storage_options=options, **CONVERT)
    again = shardkit.convert(url, str(tmp_path / "dst"), storage_options=options, resume=True, **CONVERT)
    assert again.shards_reused == first.num_shards
    victim = sorted(path for path in fs.find(f"{bucket}/train") if path.endswith(".png"))[0]
    data = bytearray(fs.cat_file(victim))
    time.sleep(1.1)                 # S3 keeps the time in whole seconds
    fs.pipe_file(victim, bytes(data[:-1]) + bytes([data[-1] ^ 1]))
    with pytest.raises(shardkit.UsageError, match="made from other input"):
        shardkit.convert(url, str(tmp_path / "dst"), storage_options=options, resume=True, **CONVERT)


def test_a_missing_object_is_one_line_without_the_credentials(
        tmp_path: Path, s3: S3Server, bucket: str, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    url = f"s3://{s3.KEY}:{s3.SECRET}@{bucket}/missing.tar"
    line = _error_line([url, str(tmp_path / "dst")], capsys)
    assert line == f"error: s3://{bucket}/missing.tar: cannot look up: no such object"
    assert not (tmp_path / "dst" / "manifest.json").exists()


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A web folder with one tree as a tar and as a zip (images large enough that the middle of
    each member's answer lies inside the member), and the tree itself for comparison."""
    tree = _tree(tmp_path / "tree", sizes=(48, 64))
    folder = tmp_path / "site"
    folder.mkdir()
    _archive(tree, folder / "train.tar")
    _archive(tree, folder / "train.zip")
    shardkit.convert(str(tree), str(tmp_path / "local"), **CONVERT)
    return folder


@pytest.mark.parametrize("name", ["train.tar", "train.zip"])
@pytest.mark.parametrize("fault", ["500", "503", "drop", "truncate", "extend", "slow"])
@pytest.mark.parametrize("after", [0, 2], ids=["listing", "members"])
def test_transient_faults_are_retried_and_change_nothing(
        tmp_path: Path, site: Path, name: str, fault: str, after: int) -> None:
    """Two failed GETs in a row, on the listing's reads or (after its two GETs) on members', are
    tried again. Mutation: checking only len(data) > length in blobs.RemoteBlob.read keeps
    truncated member reads."""
    with FaultyFolderServer(site) as server:
        server.fail(name, "none", after)
        server.fail(name, fault, 2)
        shardkit.convert(f"{server.url}/{name}", str(tmp_path / "dst"), **CONVERT)
        assert server.ranges > 0 and server.gets[name] > 2
    assert _shards(tmp_path / "dst") == _shards(tmp_path / "local")


def test_an_altered_zip_member_is_fetched_again(tmp_path: Path, site: Path) -> None:
    """The listing takes two GETs (the head, the tail with the central directory); the first
    member read after it comes back with a flipped byte, its CRC-32 disagrees, the read is tried
    again. Mutation: dropping the CRC-32 check in archives.read_zip_member stores the altered
    bytes (the shards then differ)."""
    with FaultyFolderServer(site) as server:
        server.fail("train.zip", "none", 2)
        server.fail("train.zip", "alter", 1)
        shardkit.convert(f"{server.url}/train.zip", str(tmp_path / "dst"), **CONVERT)
    assert _shards(tmp_path / "dst") == _shards(tmp_path / "local")


def test_a_zip_altered_on_every_read_stops_with_one_line(
        tmp_path: Path, site: Path, capsys: pytest.CaptureFixture) -> None:
    with FaultyFolderServer(site) as server:
        server.fail("train.zip", "none", 2)
        server.fail("train.zip", "alter", 1000)
        url = server.url.replace("http://", "http://reader:pa55word-x@")
        line = _error_line([f"{url}/train.zip", str(tmp_path / "dst")], capsys)
    assert line.startswith(f"error: {server.url}/train.zip: cannot read ")
    assert "CRC-32 differs" in line and "(tried 4 times)" in line and "pa55word" not in line
    assert not (tmp_path / "dst" / "manifest.json").exists()


def test_a_web_server_that_keeps_failing_ends_in_one_line(tmp_path: Path, site: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    with FaultyFolderServer(site) as server:
        shardkit.convert(f"{server.url}/train.tar", str(tmp_path / "first"), **CONVERT)
        server.fail("train.tar", "503", None)
        line = _error_line([f"{server.url}/train.tar", str(tmp_path / "dst")], capsys)
    assert line.startswith(f"error: {server.url}/train.tar: cannot read") and "(tried 4 times)" in line
    assert not (tmp_path / "dst" / "manifest.json").exists()


def test_a_table_at_a_url_converts_as_the_same_file_on_disk(tmp_path: Path, s3: S3Server, bucket: str) -> None:
    """A CSV in a bucket and on a web server: fetched to a temporary folder, the same shards as
    a local folder holding the file with the same time; the temporary folder is gone afterwards."""
    table = tmp_path / "web" / "rows.csv"
    table.parent.mkdir()
    table.write_text("a,b,label\n" + "".join(f"{row},{row * 0.5},c{row % 3}\n" for row in range(40)))
    _s3fs(s3).put(str(table), f"{bucket}/tables/rows.csv")
    stamp = int(_s3fs(s3).info(f"{bucket}/tables/rows.csv")["LastModified"].timestamp())
    options = dict(label_column="label", samples_per_shard=16, workers=1, quiet=True)
    before = set(os.listdir(os.environ.get("TMPDIR", "/tmp")))
    shardkit.convert(f"s3://{bucket}/tables/rows.csv", str(tmp_path / "s3"), storage_options=s3.options(),
                     **options)
    os.utime(table, (stamp, stamp))
    shardkit.convert(str(table.parent), str(tmp_path / "local"), **options)
    assert _shards(tmp_path / "s3") == _shards(tmp_path / "local")
    os.utime(table, (TIME, TIME))
    with FaultyFolderServer(table.parent) as server:
        server.fail("rows.csv", "drop", 1)
        shardkit.convert(f"{server.url}/rows.csv", str(tmp_path / "http"), **options)
    shutil.rmtree(tmp_path / "local")
    shardkit.convert(str(table.parent), str(tmp_path / "local"), **options)
    assert _shards(tmp_path / "http") == _shards(tmp_path / "local")
    assert not {name for name in set(os.listdir(os.environ.get("TMPDIR", "/tmp"))) - before
                if name.startswith("shardkit-src-")}


def test_credentials_in_the_url_reach_no_file_of_the_dataset(
        tmp_path: Path, s3: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """s3://KEY:SECRET@bucket/... works, and neither part is written anywhere in DST. Mutation:
    recording SRC as given in conversion.shown_source puts them in the manifest."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    _s3fs(s3).put(str(_tree(tmp_path / "tree")), f"{bucket}/train", recursive=True)
    shardkit.convert(f"s3://{s3.KEY}:{s3.SECRET}@{bucket}/train", str(tmp_path / "dst"), **CONVERT)
    assert json.loads((tmp_path / "dst" / "manifest.json").read_text())["source"]["path"] == f"s3://{bucket}/train"
    for path in (tmp_path / "dst").rglob("*"):
        if path.is_file():
            assert s3.SECRET.encode() not in path.read_bytes() and s3.KEY.encode() not in path.read_bytes(), path


def test_an_object_replaced_after_the_listing_is_refused(tmp_path: Path, s3: S3Server, bucket: str) -> None:
    """The listing's ETag is the object's MD5: an object replaced between the scan and its read
    (same size) is fetched again, then refused with one error naming it. Mutation: dropping the
    MD5 check in member_trees.FolderTree._fetch returns the new bytes as if nothing happened."""
    from shardkit.options import RunOptions
    from shardkit.sources import open_source
    fs = _s3fs(s3)
    fs.put(str(_tree(tmp_path / "tree")), f"{bucket}/train", recursive=True)
    source = open_source(f"s3://{bucket}/train", {}, RunOptions(workers=1, storage_options=s3.options()))
    victim = f"{bucket}/train/{source.paths[0]}"          # type: ignore[attr-defined]
    data = fs.cat_file(victim)
    fs.pipe_file(victim, data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(shardkit.RemoteError) as raised:
        list(source.encode_range(0, 3))
    assert str(raised.value).startswith(f"s3://{victim}: cannot fetch: its MD5 differs from the ETag")


def test_a_bucket_folder_of_tables_a_labels_csv_at_a_url_and_a_dataset_at_a_url(
        tmp_path: Path, s3: S3Server, bucket: str) -> None:
    """A folder of tables in a bucket reads as tables; an image tree takes its labels from a CSV
    in the bucket (a bad row named by the CSV's URL); a shardkit dataset at a URL is a usage error
    saying to pull it first."""
    fs, options = _s3fs(s3), s3.options()
    for part in range(2):
        fs.pipe_file(f"{bucket}/tables/part-{part}.csv",
                     ("x,label\n" + "".join(f"{row},{row % 2}\n" for row in range(10))).encode())
    tables = shardkit.convert(f"s3://{bucket}/tables", str(tmp_path / "tables"), label_column="label",
                              storage_options=options, workers=1, quiet=True)
    assert tables.num_samples == 20
    tree = _tree(tmp_path / "tree")
    fs.put(str(tree), f"{bucket}/train", recursive=True)
    rels = sorted(path.relative_to(tree).as_posix() for path in tree.rglob("*.*"))
    fs.pipe_file(f"{bucket}/labels.csv", ("path,label\n" + "".join(f"{rel},{number % 3}\n" for number, rel
                                                                   in enumerate(rels[:6])) + ",\n").encode())
    labelled = shardkit.convert(f"s3://{bucket}/train", str(tmp_path / "labelled"), labels=f"s3://{bucket}/labels.csv",
                                storage_options=options, **CONVERT)
    assert labelled.num_samples == 6
    skipped = [json.loads(line) for line in (tmp_path / "labelled" / "skipped.jsonl").read_text().splitlines()]
    assert [(line.get("path"), line.get("line")) for line in skipped if "path" in line] == \
        [(f"s3://{bucket}/labels.csv", 8)]
    assert shardkit.open_dataset(tmp_path / "labelled").classes == ["0", "1", "2"]
    shardkit.push(str(tmp_path / "tables"), f"s3://{bucket}/dataset", storage_options=options)
    with pytest.raises(shardkit.UsageError, match="holds a shardkit dataset; to re-shard it, `shardkit pull`"):
        shardkit.convert(f"s3://{bucket}/dataset", str(tmp_path / "again"), storage_options=options, quiet=True)


def test_a_web_folder_with_an_index_page_converts_as_the_tree(tmp_path: Path) -> None:
    """http.server's own index pages list the folder (names only: each object's size and time come
    from a HEAD); the same shards as the tree on disk, whose times the server reports."""
    tree = _tree(tmp_path / "site" / "train")
    shardkit.convert(str(tree), str(tmp_path / "local"), **CONVERT)
    handler = functools.partial(_QuietFolderHandler, directory=str(tmp_path / "site"))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/train/"
        shardkit.convert(url, str(tmp_path / "web"), **CONVERT)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert _shards(tmp_path / "web") == _shards(tmp_path / "local")


class _QuietFolderHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("fault", ["503", "truncate"])
def test_a_webdataset_tar_at_a_url_converts_as_the_tar_on_disk(tmp_path: Path, fault: str) -> None:
    """convert --sidecars of a tar over HTTP (members sharing a key are one sample), with two
    failed reads of its members retried: the shards of the same tar read from disk."""
    from tests.fields.test_sources import sidecar_tree
    from tests.fields.test_webdataset_tars import OPTIONS, pack, shard_files
    sidecar_tree(tmp_path / "src", 12)
    (tmp_path / "site").mkdir()
    archive = pack(tmp_path / "src", tmp_path / "site" / "train.tar")
    shardkit.convert(str(archive), str(tmp_path / "local"), **OPTIONS)
    with FaultyFolderServer(tmp_path / "site") as server:
        server.fail("train.tar", "none", 1)
        server.fail("train.tar", fault, 2)
        report = shardkit.convert(f"{server.url}/train.tar", str(tmp_path / "dst"), in_flight=4, **OPTIONS)
        assert server.ranges > 0
    assert report.num_samples == 12
    assert shard_files(tmp_path / "dst") == shard_files(tmp_path / "local")


def test_a_sidecar_tree_in_a_bucket_converts_as_the_tree_on_disk(tmp_path: Path, s3: S3Server, bucket: str) -> None:
    from tests.fields.test_sources import sidecar_tree
    from tests.fields.test_webdataset_tars import OPTIONS, shard_files
    sidecar_tree(tmp_path / "src", 9)
    _s3fs(s3).put(str(tmp_path / "src"), f"{bucket}/captions", recursive=True)
    shardkit.convert(str(tmp_path / "src"), str(tmp_path / "local"), **OPTIONS)
    shardkit.convert(f"s3://{bucket}/captions", str(tmp_path / "dst"), storage_options=s3.options(), **OPTIONS)
    assert shard_files(tmp_path / "dst") == shard_files(tmp_path / "local")
    manifest = (tmp_path / "dst" / "manifest.json").read_text()
    assert f"s3://{bucket}/captions" in manifest and s3.SECRET not in manifest
