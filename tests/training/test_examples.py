"""The examples run as documented, with small step counts: loss goes down, a run stopped mid-epoch
and resumed ends with the same weights, and two DDP ranks read every sample once per epoch."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
SMALL = ["--images", "120"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by both examples: the demo tree and its conversion are made once."""
    return tmp_path_factory.mktemp("examples")


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def test_train_imagefolder_learns_and_resumes_exactly(workdir: Path) -> None:
    script = str(REPO / "examples" / "train_imagefolder.py")
    common = [script, "--workdir", str(workdir), *SMALL, "--steps", "40", "--batch-size", "16"]
    whole = _run(*common)
    first, last = map(float, re.search(r"loss first ([\d.]+) -> last ([\d.]+)", whole).groups())
    assert last < first
    assert re.search(r"\d+ samples/s", whole)
    stopped = _run(*common, "--stop-at", "17")
    assert "stopped at step 17" in stopped and (workdir / "checkpoint.pt").is_file()
    resumed = _run(*common, "--resume")
    assert "resumed at step 17, epoch 2" in resumed
    assert re.search(r"weights (\w+)", resumed).group(1) == re.search(r"weights (\w+)", whole).group(1)


def test_ddp_train_two_ranks_read_every_sample_once(tmp_path: Path) -> None:
    """On the user's tree (--src: 96 images, not the 120 of --images), as on the demo tree."""
    from shardkit.samples import make_image_tree
    make_image_tree(str(tmp_path / "mine"), 96, seed=4)
    out = _run("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(REPO / "examples" / "ddp_train.py"), "--workdir", str(tmp_path / "work"), "--src",
               str(tmp_path / "mine"), *SMALL, "--epochs", "2")
    lines = re.findall(r"epoch (\d): loss [\d.]+; 2 ranks read (\d+) samples, (\d+) distinct, of (\d+)", out)
    assert [epoch for epoch, *_ in lines] == ["0", "1"], out
    assert all(read == distinct == total == "96" for _, read, distinct, total in lines), out


def _learns(out: str) -> None:
    assert "verify: OK" in out, out
    first, last = map(float, re.search(r"loss first ([\d.]+) -> last ([\d.]+)", out).groups())
    assert last < first, out


def test_caption_tree_converts_verifies_and_trains(tmp_path: Path) -> None:
    """Images with .txt captions (an icon theme of this machine, or drawn shapes) -> --sidecars."""
    out = _run(str(REPO / "examples" / "caption_tree.py"), "--workdir", str(tmp_path), "--images", "120",
               "--steps", "30", "--batch-size", "16")
    assert re.search(r"converted (\d+) samples", out) and "skipped 0" in out
    _learns(out)


def test_detection_table_converts_verifies_and_trains(tmp_path: Path) -> None:
    """A CSV of image paths and JSON boxes -> --image-column, boxes padded by collate_fields."""
    out = _run(str(REPO / "examples" / "detection_table.py"), "--workdir", str(tmp_path), "--images", "120",
               "--steps", "30", "--batch-size", "16")
    assert "converted 120 samples" in out
    _learns(out)
