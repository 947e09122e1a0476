"""Arrow's streaming CSV reader reads the file ahead in a background thread, through our stream.
When the blocks stop early (a full TMPDIR, a bad value), no such read may be left in flight: one
that runs on into the interpreter's exit aborts the process ("terminate called without an active
exception") after shardkit printed its error, turning exit status 1 into SIGABRT.

The read in flight is held at a fixed point: the background thread's third read waits on a gate
the test opens only once the stream is told to end (or once closing the blocks has returned), so
closing the blocks must wait for that read, whatever the machine's speed."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Dict

from shardkit.sources.tabular import readers
from shardkit.sources.tabular.files import TableFile, read_head
from tests.faults.helpers import wait_for

#: The read held back: the first two give the first block and the rest of its last line.
HELD_READ = 3


def test_no_read_of_the_file_is_in_flight_once_the_blocks_stop(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("a,b\n" + "".join(f"{i},x{i}\n" for i in range(400_000)))     # several 1 MiB blocks
    state: Dict[str, Any] = {"reads": 0, "in_flight": 0, "stream": None}
    lock, held, gate = threading.Lock(), threading.Event(), threading.Event()
    read = readers.NoTrailingCR.read

    def gated_read(self: readers.NoTrailingCR, size: int = -1) -> bytes:
        with lock:
            state["reads"] += 1
            state["in_flight"] += 1
            hold = state["reads"] == HELD_READ
        try:
            if hold:
                state["stream"] = self
                held.set()
                gate.wait(120)              # the test opens it; the bound only keeps a broken run from hanging
            return read(self, size)
        finally:
            with lock:
                state["in_flight"] -= 1
    monkeypatch.setattr(readers.NoTrailingCR, "read", gated_read)
    item = TableFile(str(path), path.name, path.stat().st_size, 0, "text", read_head(str(path), ","))
    blocks = readers.read_blocks(item, [0, 1], ",")
    next(blocks)
    assert held.wait(120), "the background thread never made its third read"
    closed: Dict[str, int] = {}

    def close() -> None:
        blocks.close()          # what an error in the consumer does to the generator
        closed["in_flight"] = state["in_flight"]
    closer = threading.Thread(target=close)
    closer.start()
    assert wait_for(lambda: state["stream"].ended or not closer.is_alive(), timeout=120)
    gate.set()
    closer.join(120)
    assert not closer.is_alive()
    assert closed == {"in_flight": 0}, "closing the blocks returned while a read of the file was in flight"
