"""Images are opened only in the allowed Pillow formats: EPS/PostScript never reaches Ghostscript,
at conversion, in verify --deep, or when a DataLoader reads a sample."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.codecs.pillow import IMAGE_FORMATS, image_extensions
from tests.faults.helpers import cli_env, run_cli
from tests.security.crafted import EPS, fake_ghostscript, gs_calls, one_image_dataset, png_bytes

READ_ONE = ("import sys, shardkit\nds = shardkit.open_dataset(sys.argv[1])\ntry:\n    ds[0]\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)\n    sys.exit(3)\n")


def test_eps_and_ps_are_not_image_files() -> None:
    assert ".eps" not in image_extensions() and ".ps" not in image_extensions()
    assert "EPS" not in IMAGE_FORMATS
    assert {".jpg", ".png", ".webp", ".tif"} <= image_extensions()


def test_the_fixed_extension_list_is_what_pillow_registers_for_the_allowed_formats() -> None:
    """The scan takes its image extensions from a fixed list (importing no plugin); it must be the
    list the installed Pillow registers for the allowed formats (a Pillow that adds one fails here)."""
    from PIL import Image, features

    from shardkit.codecs.pillow import _PLUGINS, _REPORTED_AS
    try:
        has_avif = features.check_module("avif")
    except ValueError:                      # a Pillow older than its AVIF plugin
        has_avif = False
    if not has_avif:
        pytest.skip("this Pillow has no AVIF plugin, so it registers fewer extensions")
    Image.init()
    allowed = set(IMAGE_FORMATS) | set(_REPORTED_AS)
    registered = {ext.lower() for ext, name in Image.registered_extensions().items() if name in allowed}
    assert image_extensions() == registered
    assert set(_PLUGINS) == set(IMAGE_FORMATS)
    assert all(Image.OPEN[name][0].__module__ == f"PIL.{_PLUGINS[name]}ImagePlugin" for name in IMAGE_FORMATS)


def test_conversion_never_runs_ghostscript(tmp_path: Path) -> None:
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    (src / "good.png").write_bytes(png_bytes())
    (src / "a.eps").write_bytes(EPS)
    (src / "disguised.png").write_bytes(EPS)        # PostScript bytes under an image name
    env = fake_ghostscript(tmp_path / "bin")
    result = run_cli("convert", tmp_path / "src", tmp_path / "dst", "--quiet", env_extra=env)
    assert result.returncode == 0, result.stderr
    assert gs_calls(tmp_path / "bin") == []
    manifest = json.loads((tmp_path / "dst" / "manifest.json").read_text())
    summary = manifest["source"]["summary"]
    assert summary["converted"] == 1 and summary["image_files"] == 2 and summary["other_files"] == 1
    skipped = (tmp_path / "dst" / "skipped.jsonl").read_text()
    assert "disguised.png" in skipped and "allowed format" in skipped


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_eps_payload_in_a_shard_never_runs_ghostscript(tmp_path: Path, fmt: str) -> None:
    dst = one_image_dataset(tmp_path, fmt, payload=EPS)
    env = fake_ghostscript(tmp_path / "bin")
    verify = run_cli("verify", dst, "--deep", env_extra=env)
    assert verify.returncode == 1 and "sample 0 does not decode" in verify.stdout + verify.stderr
    read = subprocess.run([sys.executable, "-c", READ_ONE, str(dst)], env=cli_env(env), capture_output=True,
                          text=True, timeout=120)
    assert read.returncode == 3, read.stdout + read.stderr
    assert gs_calls(tmp_path / "bin") == []


def test_read_time_allows_only_the_recorded_formats(tmp_path: Path) -> None:
    """A PNG dataset whose shard now holds a (valid) GIF: the manifest says PNG, so it is refused."""
    import io

    from PIL import Image
    gif = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(gif, "GIF")
    dst = one_image_dataset(tmp_path, "pt", payload=gif.getvalue())
    import shardkit
    with pytest.raises(shardkit.CorruptSampleError, match="allowed format"):
        shardkit.open_dataset(dst)[0]
    report = shardkit.verify(str(dst), mode="deep")
    assert [problem.kind for problem in report.problems] == ["sample"]
