"""The sdist and wheel that `python -m build` makes are complete, and the wheel installs and runs in a
fresh virtual environment."""
from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """An sdist and a wheel built from the working tree (the wheel from the sdist, as pip would)."""
    pytest.importorskip("build", reason="the test extra installs `build`")
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = done.stdout + done.stderr
    return {"sdist": next(out.glob("*.tar.gz")), "wheel": next(out.glob("*.whl")), "log": log}


def test_build_is_clean(dist: dict) -> None:
    """No setuptools deprecation or missing-file warning (an excluded cache file that is not there, or
    byte-compiling turned off by PYTHONDONTWRITEBYTECODE, is fine)."""
    harmless = ("no previously-included files", "byte-compiling is disabled")
    noisy = [line for line in dist["log"].splitlines()
             if "warning" in line.lower() and not line.startswith("copying ")
             and not any(text in line for text in harmless)]
    assert not noisy, "\n".join(noisy)


def test_sdist_carries_tests_docs_formats_and_license(dist: dict) -> None:
    with tarfile.open(dist["sdist"]) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for needed in ("LICENSE", "CHANGELOG.md", "mkdocs.yml", "tests/conftest.py", "docs/quickstart.md",
                   "formats/manifest.schema.json", "formats/hdf5.md", "docker/Dockerfile"):
        assert needed in names, f"sdist lacks {needed}"
    assert not any(name.endswith(".pyc") for name in names)


def test_wheel_carries_types_schema_and_license(dist: dict) -> None:
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = set(wheel.namelist())
        metadata = next(wheel.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert "shardkit/py.typed" in names
    assert "shardkit/manifest.schema.json" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith("tests/") for n in names)
    assert "License-Expression: Apache-2.0" in metadata
    assert "Classifier: Operating System :: POSIX" in metadata
    assert "Project-URL: Documentation" in metadata
    import shardkit
    assert f"Version: {shardkit.__version__}\n" in metadata


def test_packaged_schema_is_the_documented_one() -> None:
    """formats/manifest.schema.json is the documented contract; the package ships a byte-identical copy."""
    documented = (REPO / "formats" / "manifest.schema.json").read_bytes()
    packaged = (REPO / "shardkit" / "manifest.schema.json").read_bytes()
    assert packaged == documented, "copy formats/manifest.schema.json to shardkit/manifest.schema.json"


def test_wheel_installs_and_converts_in_a_fresh_venv(dist: dict, tmp_path: Path) -> None:
    """The wheel alone (no checkout on the path) gives a working `shardkit` command.

    The dependencies (torch, h5py, ...) come from this interpreter's site-packages through a .pth
    line, so the test needs no network and no second torch install; shardkit itself comes only from
    the wheel (a .pth line adds a directory but does not run the editable-install hooks in it).
    """
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        text=True).strip())
    (site / "outer.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(dist["wheel"])], check=True, timeout=120)
    where = subprocess.check_output(
        [str(python), "-c", "import shardkit, pathlib; print(pathlib.Path(shardkit.__file__).parent)"],
        text=True, cwd=tmp_path).strip()
    assert Path(where).is_relative_to(env_dir), f"shardkit imported from {where}, not the wheel"
    assert (Path(where) / "py.typed").exists()
    json.loads((Path(where) / "manifest.schema.json").read_text())

    shardkit_cmd = str(env_dir / "bin" / "shardkit")
    helped = subprocess.run([shardkit_cmd, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert helped.returncode == 0 and "convert" in helped.stdout, helped.stderr
    subprocess.run([str(python), "-c", "from shardkit.samples import make_image_tree; "
                    f"make_image_tree({str(tmp_path / 'src')!r}, num_images=12, seed=0)"], check=True, cwd=tmp_path)
    converted = subprocess.run([shardkit_cmd, "convert", str(tmp_path / "src"), str(tmp_path / "dst"), "--json",
                                "--samples-per-shard", "5"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert converted.returncode == 0, converted.stderr
    assert json.loads(converted.stdout)["num_samples"] == 12
    verified = subprocess.run([shardkit_cmd, "verify", str(tmp_path / "dst"), "--quiet"], cwd=tmp_path, timeout=60)
    assert verified.returncode == 0
