"""--executor ray on a local Ray the tests start: the same bytes as the local executor, a task
killed mid-shard is retried, and --resume finishes a run whose driver was killed. These run the
local-Ray recipe of docs/scale-out.md."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, Optional

import pytest

import shardkit
from shardkit.runtime.fault_points import KILL_AT
from tests.faults.helpers import EPOCH, done_records, start_cli, tree_bytes, wait_for
from tests.integration.test_docs_snippets import REPO, page_blocks

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'shardkit[ray]')")


@pytest.fixture(scope="module")
def killed_dst(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The DST of the retry test: the first attempt at its shard 1 kills itself once its file is
    written, before it is committed (runtime/fault_points.py; the marker file records the kill)."""
    return tmp_path_factory.mktemp("ray-killed") / "dst"


@pytest.fixture(scope="module")
def ray_address(killed_dst: Path) -> Iterator[str]:
    """One local Ray for every test here (starting one costs seconds). Its workers inherit the
    fault point of the retry test, set before they start."""
    marker = killed_dst.parent / "killed"
    previous = os.environ.get(KILL_AT)
    os.environ[KILL_AT] = f"shard-written:{killed_dst / 'shards' / 'shard-00001.h5'}:{marker}"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        if previous is None:
            os.environ.pop(KILL_AT, None)
        else:
            os.environ[KILL_AT] = previous


@pytest.fixture
def epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH["SOURCE_DATE_EPOCH"])


def test_the_scale_out_recipe_runs_as_written(tmp_path: Path) -> None:
    """docs/scale-out.md's first try on one machine: its block, unchanged, in a fresh folder, as
    from a new shell (no RAY_ setting of this process). Its `convert --executor ray --quiet`
    starts a local Ray and prints nothing of Ray's (the loggers' notices, such as the banner about
    the cluster's token, are errors-only while a quiet run starts it)."""
    page = REPO / "docs" / "scale-out.md"
    [block] = [block for block in page_blocks(page)
               if block.marker("run-by") == "tests/integration/test_ray_executor.py"]
    env = {name: value for name, value in os.environ.items() if not name.startswith("RAY_")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{block.where}:\n{done.stdout}\n{done.stderr}"
    assert "OK (full check of 1 shards)" in done.stdout
    # verify (not quiet in the recipe) reports its progress on stderr; nothing else may be there
    assert all(line.startswith("verify (full): ") for line in done.stderr.splitlines()), done.stderr
    with shardkit.open_dataset(str(tmp_path / "scale-demo" / "ray-out")) as converted:
        assert len(converted) == 64


def _local(src: Path, dst: Path, per_shard: int) -> Dict[str, bytes]:
    shardkit.convert(str(src), str(dst), format="hdf5", samples_per_shard=per_shard, workers=1, quiet=True)
    return tree_bytes(dst)


def test_ray_output_is_byte_identical_to_local(ray_address: str, image_tree: Path, tmp_path: Path,
                                               epoch: None) -> None:
    expected = _local(image_tree, tmp_path / "local", 16)
    report = shardkit.convert(str(image_tree), str(tmp_path / "ray"), format="hdf5", samples_per_shard=16,
                              executor="ray", quiet=True)
    assert report.num_shards == 8 and report.shards_written == 8
    assert tree_bytes(tmp_path / "ray") == expected


def test_a_task_killed_mid_shard_is_retried(ray_address: str, killed_dst: Path, image_tree: Path, tmp_path: Path,
                                            epoch: None) -> None:
    """The Ray task writing shard 1 is SIGKILLed with its temporary file written but not yet
    committed (a fixed point, not a race with a polling killer); Ray runs it again and the dataset
    is the local one, byte for byte, with no temporary file left."""
    expected = _local(image_tree, tmp_path / "local", 24)
    report = shardkit.convert(image_tree, killed_dst, samples_per_shard=24, executor="ray")
    assert (killed_dst.parent / "killed").exists(), "the first attempt at shard 1 was not killed"
    assert report.shards_written == 5
    assert tree_bytes(killed_dst) == expected


def test_resume_after_the_driver_was_killed(ray_address: str, image_tree: Path, tmp_path: Path, epoch: None) -> None:
    expected = _local(image_tree, tmp_path / "local", 4)
    dst = tmp_path / "ray"
    args = ["convert", image_tree, dst, "--samples-per-shard", 4, "--executor", "ray", "--address", ray_address,
            "--quiet"]
    driver: Optional[object] = start_cli(*args, env_extra=EPOCH)
    try:
        assert wait_for(lambda: done_records(dst) >= 3, timeout=60), driver.stderr.read()
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.stdout.close()
        driver.stderr.close()
    assert not (dst / "manifest.json").exists()
    report = shardkit.convert(str(image_tree), str(dst), format="hdf5", samples_per_shard=4, executor="ray",
                              resume=True, quiet=True)
    assert report.shards_reused >= 3
    assert tree_bytes(dst) == expected
