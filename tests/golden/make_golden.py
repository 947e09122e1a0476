"""Write the golden dataset of every registered format whose golden folder does not exist yet.

Golden datasets are committed and never regenerated: a later shardkit must read every one of
them. Run `python tests/golden/make_golden.py` once when a format (or format version) is added.
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import shardkit  # noqa: E402
from shardkit.formats import format_names, get_format  # noqa: E402
from shardkit.samples import make_image_tree  # noqa: E402


def golden_dir(name: str, version: int) -> Path:
    """tests/golden/<format>-v<version>."""
    return HERE / f"{name}-v{version}"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        files = make_image_tree(str(src), num_images=8, classes=("cat", "dog"), seed=11, sizes=(6, 14))
        ordered = sorted(files, key=lambda rel: tuple(rel.split("/")))
        expected = [{"sha256": hashlib.sha256((src / rel).read_bytes()).hexdigest(), "class": rel.split("/")[0]}
                    for rel in ordered]
        for name in format_names():
            fmt = get_format(name)
            dst = golden_dir(name, fmt.version)
            if dst.exists():
                continue
            shardkit.convert(str(src), str(dst), format=name, samples_per_shard=5, order="source", quiet=True)
            (dst / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
            print(f"wrote {dst}")


if __name__ == "__main__":
    main()
