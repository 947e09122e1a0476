"""README.md's first example runs as written: convert and verify an image tree whose images differ
in size, then train-style reads with batches of 256 through 8 workers and the default collate.
Only the two example paths are pointed at a real tree and a fresh DST."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from shardkit.samples import make_image_tree
from tests.integration.test_docs_snippets import Block, page_blocks

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
EXAMPLE_SRC, EXAMPLE_DST = "~/data/imagenet/train", "/nvme/imagenet-train"


def readme_example() -> List[Block]:
    """The README blocks this test runs: the ones that name it."""
    blocks = [block for block in page_blocks(README)
              if block.marker("run-by") == "tests/integration/test_readme_example.py"]
    assert [block.kind for block in blocks] == ["shell", "python"], [block.where for block in blocks]
    return blocks


def pointed(code: str, src: Path, dst: Path) -> str:
    assert EXAMPLE_DST in code, f"the README example no longer reads {EXAMPLE_DST}"
    return code.replace(EXAMPLE_SRC, str(src)).replace(EXAMPLE_DST, str(dst))


def test_readme_example_trains_on_images_of_different_sizes(tmp_path: Path) -> None:
    src, dst = tmp_path / "train", tmp_path / "dst"
    make_image_tree(str(src), num_images=40, sizes=(24, 300), seed=3)
    shell, python = readme_example()
    env: Dict[str, str] = {**os.environ,
                           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", pointed(shell.code, src, dst)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{shell.where}:\n{done.stdout}\n{done.stderr}"
    assert "OK" in done.stdout
    scope = {"__name__": "__readme__"}
    exec(compile(pointed(python.code, src, dst), python.where, "exec"), scope)
    images, labels = scope["images"], scope["labels"]
    assert tuple(images.shape) == (40, 3, 224, 224) and str(images.dtype) == "torch.uint8"
    assert sorted(labels.tolist()) == sorted(scope["ds"].targets().tolist())
    scope["ds"].close()
    scope.clear()         # to_tensor's globals are scope: a cycle that would keep 8 workers alive
    gc.collect()


@pytest.mark.parametrize("path", [EXAMPLE_SRC, EXAMPLE_DST])
def test_docs_home_page_converts_the_same_example(path: str) -> None:
    """docs/index.md repeats the README's commands: they stay the ones this test runs."""
    index = (REPO / "docs" / "index.md").read_text()
    assert path in index and path in readme_example()[0].code
