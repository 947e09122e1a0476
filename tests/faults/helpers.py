"""Shared tools of the fault-injection suite: real `shardkit` processes, real damage to real files."""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[2]
#: Samples per shard of the process tests (conftest's process_tree: 120 images -> 30 shards).
SHARD = 4
#: A fixed creation time, so every run of one plan is byte-identical, manifest included.
EPOCH = {"SOURCE_DATE_EPOCH": "1700000000"}


def convert_args(src: Path, dst: Path, fmt: str, workers: int = 1) -> List[object]:
    """The command line every process test runs (and resumes)."""
    return ["convert", src, dst, "--format", fmt, "--samples-per-shard", SHARD, "--workers", workers, "--quiet"]


def cli_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Environment for a child `python -m shardkit`: this checkout first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONWARNINGS", None)
    env.update(extra or {})
    return env


def cli_args(*args: object) -> List[str]:
    return [sys.executable, "-m", "shardkit", *[os.fspath(a) if isinstance(a, Path) else str(a) for a in args]]


def run_cli(*args: object, timeout: float = 120, preexec_fn: Optional[Callable[[], None]] = None,
            env_extra: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run `shardkit ARGS` in a fresh interpreter and capture its output (bytes-safe text)."""
    return subprocess.run(cli_args(*args), env=cli_env(env_extra), capture_output=True, timeout=timeout,
                          preexec_fn=preexec_fn, text=True, errors="backslashreplace")


def start_cli(*args: object, env_extra: Optional[Dict[str, str]] = None, **popen: Any) -> subprocess.Popen:
    """Start `shardkit ARGS` in its own session (so a test can signal it and its workers apart)."""
    return subprocess.Popen(cli_args(*args), env=cli_env(env_extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="backslashreplace", start_new_session=True,
                            **popen)


def done_records(dst: Path) -> int:
    """How many shards a running conversion has recorded as finished (0 once its journal is gone:
    the folder may vanish while it is listed, at the end of a run)."""
    try:
        return sum(1 for name in os.listdir(dst / ".shardkit" / "done") if name.startswith("shard-"))
    except OSError:
        return 0


def timed_run(args: Sequence[object], dst: Path) -> Tuple[float, float]:
    """Run `shardkit ARGS` to the end, noting when its plan record appeared in dst (the
    conversion proper starts) and when it ended: (plan seconds, end seconds) from the start.
    Kill trials spread their delays over this timeline."""
    started = time.monotonic()
    proc = start_cli(*args, env_extra=EPOCH)
    planned = None
    while proc.poll() is None:
        if planned is None and (dst / ".shardkit" / "plan.json").exists():
            planned = time.monotonic() - started
        time.sleep(0.002)
    ended = time.monotonic() - started
    _, stderr = proc.communicate()
    assert proc.returncode == 0, stderr
    return (ended * 0.5 if planned is None else planned), ended


def assert_no_traceback(result: "subprocess.CompletedProcess | str") -> None:
    """Expected failures print one `error: ...` line, never a Python traceback."""
    output = result if isinstance(result, str) else (result.stdout or "") + (result.stderr or "")
    assert "Traceback" not in output, output
    # a bare exception line ("KeyError: 'x'") at the start of a line is a leaked crash too
    assert not re.search(r"^[A-Za-z_.]*(Error|Exception|Interrupt|Exit)\b", output, re.M), output


def error_lines(result: subprocess.CompletedProcess) -> List[str]:
    return [line for line in (result.stderr or "").splitlines() if line.startswith("error:")]


@contextlib.contextmanager
def bit_flipped(path: Path, offset: int, bit: int) -> Iterator[None]:
    """Within the block, one real bit of path is flipped; it is flipped back afterwards."""
    flip_bit(path, offset, bit)
    try:
        yield
    finally:
        flip_bit(path, offset, bit)


@contextlib.contextmanager
def bits_flipped(flips: Dict[Path, Tuple[int, int]]) -> Iterator[None]:
    """Within the block, one real bit of each file (path: (offset, bit)) is flipped; all are
    flipped back afterwards."""
    with contextlib.ExitStack() as stack:
        for path, (offset, bit) in flips.items():
            stack.enter_context(bit_flipped(path, offset, bit))
        yield


def flip_bit(path: Path, offset: int, bit: int) -> None:
    """Flip one real bit of a real file in place."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ (1 << bit)]))
        handle.flush()
        os.fsync(handle.fileno())


def shard_paths(dst: Path) -> List[Path]:
    """Shard files listed in DST's manifest, in order."""
    return [dst / entry["path"] for entry in json.loads((dst / "manifest.json").read_text())["shards"]]


def tree_bytes(dst: Path, skip: Sequence[str] = ()) -> Dict[str, bytes]:
    """Every file below dst (relative path -> content), for byte-for-byte comparisons."""
    found: Dict[str, bytes] = {}
    for dirpath, _, files in os.walk(dst):
        for name in files:
            full = Path(dirpath) / name
            rel = full.relative_to(dst).as_posix()
            if not any(rel.startswith(prefix) for prefix in skip):
                found[rel] = full.read_bytes()
    return found


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.005) -> bool:
    """Poll predicate until it holds or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def session_processes(sid: int) -> List[int]:
    """Every live process of a session (the command and all its workers and helpers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry))
    return found


def make_tiny_tree(root: Path, count: int, seed: int = 0, classes: int = 3) -> List[str]:
    """An ImageFolder tree of count tiny JPEG/PNG files (fast to convert, real to decode)."""
    import io

    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    written = []
    for number in range(count):
        folder = root / f"class{number % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, size=(int(rng.integers(6, 14)), int(rng.integers(6, 14)), 3), dtype=np.uint8)
        buffer = io.BytesIO()
        ext = ".jpg" if number % 3 else ".png"
        Image.fromarray(pixels).save(buffer, "JPEG" if ext == ".jpg" else "PNG")
        (folder / f"{number:05d}{ext}").write_bytes(buffer.getvalue())
        written.append(f"class{number % classes}/{number:05d}{ext}")
    return written


def kill_append_and_rerun(convert_old: Callable[[Path], Any], new: Path, work: Path, point: str, staged_shard: str,
                          old_samples: int) -> Path:
    """`convert NEW DST --append` killed (SIGKILL) at a fault point (at "shard-written": once the append's
    staged_shard is written), DST made by convert_old(DST) in work: DST's old files and manifest are as
    they were and the old dataset reads (and verifies, when nothing was moved in yet); rerunning the
    append gives the files of an uninterrupted append (convert_old, then the append), byte for byte. DST."""
    import signal
    import shardkit
    reference, dst, marker = work / "reference", work / "dst", work / "killed"
    convert_old(reference)
    assert run_cli("convert", new, reference, "--append", "--quiet", env_extra=EPOCH).returncode == 0
    expected = tree_bytes(reference)
    convert_old(dst)
    key = str(dst / ".shardkit" / "append" / "shards" / staged_shard) if point == "shard-written" else str(dst)
    before = tree_bytes(dst)
    killed = run_cli("convert", new, dst, "--append", "--quiet",
                     env_extra={**EPOCH, "SHARDKIT_TEST_KILL_AT": f"{point}:{key}:{marker}"})
    assert killed.returncode == -signal.SIGKILL and marker.exists()
    assert {name: data for name, data in tree_bytes(dst, skip=(".shardkit",)).items() if name in before} == before
    assert json.loads((dst / "manifest.json").read_bytes()) == json.loads(before["manifest.json"])
    assert len(shardkit.open_dataset(dst)) == old_samples
    if point == "shard-written":
        assert shardkit.verify(dst).ok                       # nothing of the append is in the dataset yet
    rerun = run_cli("convert", new, dst, "--append", "--quiet", env_extra=EPOCH)
    assert rerun.returncode == 0, rerun.stderr
    assert tree_bytes(dst) == expected                      # as an uninterrupted append: byte for byte
    return dst
