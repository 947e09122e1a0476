"""A script that calls shardkit.convert() at its top level, without an `if __name__ == "__main__":`
guard, while workers are spawned (a process running a second thread, such as numpy's OpenBLAS
pool or any thread of the script, spawns them): each worker imports the script and would convert
again. The user is told that in one line, with what to do, and no DST is left behind. A process
running one thread forks its workers, which import nothing, so the same script converts once."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

import pytest

from tests.faults.helpers import REPO, cli_env

#: a second thread, so that shardkit spawns its workers whatever OPENBLAS_NUM_THREADS says
SECOND_THREAD = "import threading\nthreading.Thread(target=threading.Event().wait, daemon=True).start()\n"
CALL = "shardkit.convert({src!r}, {dst!r}, format='lmdb', samples_per_shard=20, quiet=True{extra})\n"


def _run_script(tmp_path: Path, image_tree: Path, body: str, extra: str = "",
                env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    script = tmp_path / "make_dataset.py"
    call = CALL.format(src=str(image_tree), dst=str(tmp_path / "dst"), extra=extra)
    script.write_text("import shardkit\n" + body.format(call=call) + "print('converted')\n")
    # two workers by default, whatever this machine's CPU count (SHARDKIT_WORKERS sets the default)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                          env=cli_env({"SHARDKIT_WORKERS": "2", **(env or {})}),
                          capture_output=True, text=True, timeout=300)


def test_an_unguarded_script_is_told_to_guard_the_call_or_use_one_worker(tmp_path: Path, image_tree: Path) -> None:
    done = _run_script(tmp_path, image_tree, SECOND_THREAD + "{call}")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("shardkit.errors.UnguardedMainError: worker processes could not start")
    assert str(tmp_path / "make_dataset.py") in last
    assert 'if __name__ == "__main__":' in last and "workers=1" in last
    assert "died unexpectedly" not in done.stderr and "--resume" not in done.stderr
    assert "converted" not in done.stdout
    assert not (tmp_path / "dst").exists()       # made by this run, nothing written: gone again


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_an_unguarded_script_running_one_thread_forks_its_workers_and_converts_once(
        tmp_path: Path, image_tree: Path) -> None:
    done = _run_script(tmp_path, image_tree, "{call}", env={"OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["converted"]
    import shardkit
    report = shardkit.verify(str(tmp_path / "dst"), workers=1)
    assert report.ok and report.shards_checked > 1


def _guarded_script_from_the_docs() -> str:
    """The script of docs/api.md ("Calling convert from a script"), as written there."""
    page = (REPO / "docs" / "api.md").read_text()
    blocks = [part.split("```")[0] for part in page.split("```python\n")[1:]]
    return next(block for block in blocks if 'if __name__ == "__main__":' in block)


@pytest.mark.parametrize("fix", ["the guard of docs/api.md", "workers=1"])
def test_the_two_fixes_the_error_names_both_work(tmp_path: Path, image_tree: Path, fix: str) -> None:
    if fix == "workers=1":
        done = _run_script(tmp_path, image_tree, SECOND_THREAD + "{call}", ", workers=1")
    else:
        script = _guarded_script_from_the_docs().replace('"images/"', repr(str(image_tree))) \
            .replace('"dataset/"', repr(str(tmp_path / "dst")))
        assert repr(str(image_tree)) in script
        (tmp_path / "make_dataset.py").write_text(script)
        done = subprocess.run([sys.executable, "make_dataset.py"], cwd=tmp_path,
                              env=cli_env({"SHARDKIT_WORKERS": "2"}), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "dst" / "manifest.json").is_file()
    import shardkit
    assert shardkit.verify(str(tmp_path / "dst"), workers=1).ok
