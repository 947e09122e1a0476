"""Messages say what is really wrong and what to do: flat image folders, unwritable DSTs, manifests."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.manifest import _body_checksum


def test_a_flat_folder_of_images_suggests_no_labels_or_labels(image_tree: Path, tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    for number, image in enumerate(sorted(image_tree.rglob("*.png"))[:5]):
        shutil.copy(image, flat / f"{number}.png")
    result = CliRunner().invoke(main, ["convert", str(flat), str(tmp_path / "out"), "-q"])
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert "pass --no-labels" in result.output and "--labels FILE" in result.output
    assert not (tmp_path / "out").exists()


def test_dst_under_proc_is_not_called_a_full_disk(image_tree: Path) -> None:
    result = CliRunner().invoke(main, ["convert", str(image_tree), "/proc/shardkit-test/out", "-q"])
    assert result.exit_code == 2, result.output
    assert "No space" not in result.output and "--resume" not in result.output
    assert "cannot write (No such file or directory)" in result.output


@pytest.fixture
def read_only_folder(tmp_path: Path):
    """A folder this process cannot write: a read-only tmpfs as root, a 0o555 folder otherwise."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("running as root without the right to mount a read-only tmpfs")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize("inside", [True, False])
def test_read_only_dst_is_a_usage_error_naming_the_cause(inside: bool, image_tree: Path,
                                                         read_only_folder: Path) -> None:
    dst = read_only_folder / "out" if inside else read_only_folder
    result = CliRunner().invoke(main, ["convert", str(image_tree), str(dst), "-q"])
    assert result.exit_code == 2, result.output
    assert "--resume" not in result.output
    assert "Read-only file system" in result.output or "Permission denied" in result.output
    assert os.listdir(read_only_folder) == []


def _reseal(dst: Path, change) -> None:
    path = dst / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    data["manifest_sha256"] = _body_checksum({k: v for k, v in data.items() if k != "manifest_sha256"})
    path.write_text(json.dumps(data, indent=2))


@pytest.mark.parametrize("value, words", [(0, "manifest_version 0 is invalid"), (-1, "-1 is invalid"),
                                          ("1", "must be a whole number, not str '1'")])
def test_verify_refuses_a_bad_manifest_version(value, words: str, writable_dataset: Path) -> None:
    _reseal(writable_dataset, lambda data: data.update(manifest_version=value))
    report = shardkit.verify(str(writable_dataset))
    assert not report.ok and words in report.problems[0].message


def test_a_reindented_manifest_is_still_valid(writable_dataset: Path) -> None:
    path = writable_dataset / "manifest.json"
    path.write_text(json.dumps(json.loads(path.read_text()), indent=5))
    assert shardkit.verify(str(writable_dataset)).ok
    assert len(shardkit.open_dataset(writable_dataset)) == 120
