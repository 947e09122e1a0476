"""shardkit bench: report fields, JSON shape, recommendation, exit codes. Never timings."""
from __future__ import annotations

import json
import multiprocessing
import sys
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardkit.ops.bench import DECODE_SIDE, ResizeToTensor, bench, parse_worker_counts
from shardkit.cli import main
from shardkit.errors import CorruptShardError, UsageError
from shardkit.manifest import load_manifest
from shardkit.samples import make_image_tree

REPORT_KEYS = {"version", "dst", "format", "num_samples", "bytes_per_sample", "decode", "collate", "reads",
               "batch_size", "seconds", "cpus", "results", "recommended_num_workers", "recommendation"}
RESULT_KEYS = {"num_workers", "samples", "batches", "seconds", "samples_per_s", "mb_per_s", "first_batch_s"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 small images in 5 shards of hdf5 (every format is covered by test_every_format)."""
    import shardkit
    root = tmp_path_factory.mktemp("bench")
    make_image_tree(str(root / "images"), num_images=40, seed=5, sizes=(16, 48))
    shardkit.convert(str(root / "images"), str(root / "dst"), samples_per_shard=8, quiet=True)
    return root / "dst"


def run(*args: object) -> "CliRunner.invoke":
    return CliRunner().invoke(main, ["bench", *[str(a) for a in args]], catch_exceptions=False)


def test_report_has_one_result_per_setting(tiny: Path) -> None:
    seen = []
    report = bench(str(tiny), num_workers=(0, 1), batch_size=8, seconds=0.2, on_result=seen.append)
    manifest = load_manifest(tiny)
    assert [r.num_workers for r in report.results] == [0, 1] and seen == report.results
    assert report.format == "hdf5" and report.num_samples == 40 and report.collate == "raw"
    assert report.bytes_per_sample == pytest.approx(manifest.total_bytes / 40)
    assert report.cpus >= 1 and report.batch_size == 8 and report.decode is False
    for result in report.results:
        assert result.batches >= 2 and result.samples == 8 * result.batches   # epochs run on: batches stay full
        assert result.samples_per_s == pytest.approx(result.samples / result.seconds)
        assert result.mb_per_s == pytest.approx(result.samples_per_s * report.bytes_per_sample / 1e6)
        assert result.first_batch_s > 0          # measured (a zero would mean it never was)
    assert report.recommended_num_workers in (0, 1)
    assert f"num_workers={report.recommended_num_workers}" in report.recommendation
    assert "batch_size=8" in report.recommendation and "--decode" in report.recommendation
    assert "collate_fn=shardkit.collate_raw" in report.recommendation
    assert multiprocessing.active_children() == []      # every worker was shut down


def test_recommendation_prefers_fewer_workers_when_close(tiny: Path) -> None:
    from shardkit.ops.bench import BenchResult, _recommend
    report = bench(str(tiny), num_workers=(0,), batch_size=8, seconds=0.05)
    report.results = [BenchResult(0, 100, 10, 1.0, 100.0, 1.0, 0.1), BenchResult(2, 104, 10, 1.0, 104.0, 1.0, 0.1),
                      BenchResult(4, 80, 10, 1.0, 80.0, 1.0, 0.1)]
    assert _recommend(report)[0] == 0          # 2 workers gain under 5%
    report.results[1] = BenchResult(2, 150, 10, 1.0, 150.0, 1.5, 0.1)
    workers, text = _recommend(report)
    assert workers == 2 and "persistent_workers=True" in text and "worker_init_fn" in text


def test_decode_stacks_fixed_size_tensors(tiny: Path) -> None:
    report = bench(str(tiny), num_workers=(0,), batch_size=4, decode=True, seconds=0.1)
    assert report.decode is True and report.collate == "stack" and "3x224x224" in report.reads
    assert report.results[0].samples == 4 * report.results[0].batches > 0
    assert "--decode" not in report.recommendation


def test_fixed_shape_samples_stack(tmp_path: Path) -> None:
    import shardkit
    rows = "".join(f"{k * 0.5},{k % 7},{k % 3}\n" for k in range(100))
    (tmp_path / "table.csv").write_text("x,y,label\n" + rows)
    dst = tmp_path / "table"
    shardkit.convert(str(tmp_path / "table.csv"), str(dst), label_column="label", samples_per_shard=30, quiet=True)
    for decode, reads in ((False, "stored arrays, stacked"), (True, "decoded to tensors, stacked")):
        report = bench(str(dst), num_workers=(0, 1), batch_size=16, decode=decode, seconds=0.1)
        assert report.collate == "stack" and report.reads == reads and report.num_samples == 100
        assert all(r.samples == 16 * r.batches > 0 for r in report.results)    # counted from [samples, labels]
        # advice that fits a table: its rows are not images, and nothing is left to decode
        assert "decod" not in report.recommendation.replace("without decoding", "")
        assert ("table rows are stored as fixed-shape arrays" in report.recommendation) is not decode


def test_resize_to_tensor_gives_chw_uint8() -> None:
    import torch
    from PIL import Image
    tensor = ResizeToTensor(DECODE_SIDE)(Image.new("RGB", (50, 30), (10, 20, 30)))
    assert tensor.shape == (3, DECODE_SIDE, DECODE_SIDE) and tensor.dtype == torch.uint8
    assert tensor[:, 0, 0].tolist() == [10, 20, 30]


def test_every_format(dataset_dir: Path, fmt: str) -> None:
    report = bench(str(dataset_dir), num_workers=(0,), batch_size=16, seconds=0.05)
    assert report.format == fmt and report.num_samples == 120 and report.results[0].samples > 0


def test_cli_json(tiny: Path) -> None:
    result = run(tiny, "--num-workers", "0,2", "--batch-size", "8", "--seconds", "0.1", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == REPORT_KEYS
    assert [r["num_workers"] for r in data["results"]] == [0, 2]
    assert all(set(r) == RESULT_KEYS for r in data["results"])
    assert data["dst"] == str(tiny) and data["batch_size"] == 8 and data["seconds"] == 0.1


def test_cli_text(tiny: Path) -> None:
    result = run(tiny, "--num-workers", "0", "--batch-size", "8", "--seconds", "0.1", "--quiet")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("num_workers=0") and "samples/s" in lines[0] and "MB/s" in lines[0]
    assert "40 hdf5 samples, stored bytes, one RawBatch per batch" in lines[1]
    assert lines[2].startswith("recommended: DataLoader(ds, batch_size=8")


@pytest.mark.parametrize("args, message", [
    (["--num-workers", "a,b"], "invalid --num-workers"),
    (["--num-workers", "-1"], "invalid --num-workers"),
    (["--num-workers", ","], "invalid --num-workers"),
    (["--batch-size", "0"], "--batch-size"),
    (["--seconds", "0"], "--seconds"),
    (["--seconds", "soon"], "--seconds"),
    (["--turbo"], "No such option"),
])
def test_bad_options_exit_2(tiny: Path, args: list, message: str) -> None:
    result = run(tiny, *args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_missing_or_non_dataset_path_exits_2(tmp_path: Path) -> None:
    for path in (tmp_path / "nowhere", tmp_path):
        result = run(path, "--seconds", "0.1")
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: ") and str(path) in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_damaged_shard_exits_1_naming_it(tiny: Path, tmp_path: Path) -> None:
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(tiny, copy)
    shard = copy / load_manifest(copy).shards[2].path
    os.truncate(shard, shard.stat().st_size // 2)
    result = run(copy, "--num-workers", "0", "--seconds", "0.1")
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and shard.name in result.output
    assert len(result.output.strip().splitlines()) == 1
    with pytest.raises(CorruptShardError):
        bench(str(copy), num_workers=(0,), seconds=0.1)


def test_stray_file_does_not_block(tiny: Path, tmp_path: Path) -> None:
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(tiny, copy)
    (copy / "shards" / "notes.txt").write_text("not a shard")
    result = run(copy, "--num-workers", "0", "--seconds", "0.05", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["num_samples"] == 40


def test_api_rejects_bad_arguments(tiny: Path) -> None:
    for kwargs in ({"num_workers": ()}, {"num_workers": (-1,)}, {"batch_size": 0}, {"seconds": 0}):
        with pytest.raises(UsageError):
            bench(str(tiny), **kwargs)
    assert parse_worker_counts("0, 1,4") == [0, 1, 4]


def test_docs_section_python_runs(tiny: Path) -> None:
    import re
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    section = page.split("## shardkit bench", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/cli.md", "exec"), {"DST": str(tiny)})


def test_plot_draws_throughput_against_workers(tiny: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the test extra installs matplotlib")
    out = tmp_path / "bench.png"
    result = run(tiny, "--num-workers", "0,1", "--batch-size", "8", "--seconds", "0.05", "--quiet", "--plot", out)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == f"plot: {out}"
    image = out.read_bytes()
    assert image.startswith(b"\x89PNG") and len(image) > 5000


def test_plot_without_matplotlib_says_how_to_install_it(tiny: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)      # as if it were not installed
    result = CliRunner().invoke(main, ["bench", str(tiny), "--plot", str(tmp_path / "bench.png")])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: --plot needs matplotlib, which is not installed: "
                                     "pip install matplotlib")
    assert not (tmp_path / "bench.png").exists()
