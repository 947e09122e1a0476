"""Option combinations of the image modes: refused with one clear line (exit code 2) before any work."""
from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
from click.testing import CliRunner

from shardkit.cli import main
from shardkit.codecs.image import make_image_codec
from shardkit.errors import UsageError

BAD = [
    (["--image-mode", "raw"], "needs --size"),
    (["--image-mode", "jpeg", "--size", "8", "8"], "--size applies to --image-mode raw only"),
    (["--size", "8", "8"], "--size applies to --image-mode raw only"),
    (["--image-mode", "raw", "--size", "0", "8"], "--size must be"),
    (["--image-mode", "raw", "--size", "8", "8", "--resize", "8"], "--resize applies to"),
    (["--resize", "64"], "--resize applies to"),
    (["--image-mode", "png", "--resize", "0"], "--resize must be"),
    (["--image-mode", "png", "--quality", "90"], "png is lossless"),
    (["--image-mode", "raw", "--size", "8", "8", "--quality", "90"], "--quality applies to"),
    (["--quality", "90"], "--quality applies to"),
    (["--image-mode", "jpeg", "--quality", "0"], "between 1 and 100"),
    (["--image-mode", "webp", "--quality", "101"], "between 1 and 100"),
    (["--image-mode", "jpeg", "--background", "not-a-colour"], "is not a colour"),
    (["--image-mode", "jpeg", "--background", "#ff000080"], "must be opaque"),
    (["--image-mode", "tiff"], "'tiff' is not one of"),
]


@pytest.mark.parametrize("args,message", BAD)
def test_cli_refuses_bad_combinations(image_tree: Path, tmp_path: Path, args: List[str], message: str) -> None:
    dst = tmp_path / "out"
    result = CliRunner().invoke(main, ["convert", str(image_tree), str(dst), "--quiet", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not dst.exists()                   # refused before anything was written


@pytest.mark.parametrize("options", [
    {"mode": "raw", "size": (224, 224)},
    {"mode": "jpeg", "resize": 256, "quality": 80, "background": "black"},
    {"mode": "webp"},
    {"mode": "png", "resize": 32, "background": "rgb(10,20,30)"},
    {"mode": "passthrough", "background": "#123456"},
])
def test_good_combinations_are_accepted_and_recorded(options: dict) -> None:
    codec = make_image_codec(**options)
    described = codec.describe()
    assert described["image_mode"] == options["mode"]
    assert described["orientation"] == "exif"
    assert described["background"].startswith("#") and len(described["background"]) == 7
    if options["mode"] == "raw":
        assert described["size"] == [224, 224] and codec.schema(True).shape == (224, 224, 3)
        assert codec.schema(True).layout == "array" and codec.schema(True).dtype == "uint8"
    if options["mode"] in ("jpeg", "webp"):
        assert described["quality"] == options.get("quality", 90)
    if options["mode"] in ("jpeg", "png", "webp"):
        assert described["resize"] == options.get("resize") and described["resample"] == "lanczos"
        assert described["metadata"] == "stripped"


def test_background_forms_are_normalised() -> None:
    assert make_image_codec("png", background="white").describe()["background"] == "#ffffff"
    assert make_image_codec("png", background="rgb(10,20,30)").describe()["background"] == "#0a141e"
    assert make_image_codec("png", background=(1, 2, 3)).background == (1, 2, 3)


def test_python_api_raises_usage_error(image_tree: Path, tmp_path: Path) -> None:
    import shardkit
    with pytest.raises(UsageError, match="needs --size"):
        shardkit.convert(str(image_tree), str(tmp_path / "out"), image_mode="raw")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("validate", ["fast", "none"])
def test_validate_below_full_is_for_passthrough_only(validate: str) -> None:
    assert make_image_codec("passthrough", validate=validate).describe()["validate"] == validate
    with pytest.raises(UsageError, match="passthrough only"):
        make_image_codec("jpeg", validate=validate)
    with pytest.raises(UsageError, match="unknown --validate"):
        make_image_codec("passthrough", validate="quick")
