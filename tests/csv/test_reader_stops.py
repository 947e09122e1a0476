"""Arrow's streaming CSV reader reads the file ahead in a background thread, through our stream.
When the blocks stop early (a full TMPDIR, a bad value), no such read may be left in flight: one
that runs on into the interpreter's exit aborts the process ("terminate called without an active
exception") after shardkit printed its error, turning exit status 1 into SIGABRT."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from shardkit.sources.tabular import readers
from shardkit.sources.tabular.files import TableFile, read_head


def test_no_read_of_the_file_is_in_flight_once_the_blocks_stop(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("a,b\n" + "".join(f"{i},x{i}\n" for i in range(400_000)))     # several blocks
    in_flight, lock = [0], threading.Lock()
    read = readers.NoTrailingCR.read

    def slow_read(self: readers.NoTrailingCR, size: int = -1) -> bytes:
        with lock:
            in_flight[0] += 1
        try:
            time.sleep(0.05)        # a slow disk: the background thread is inside a read most of the time
            return read(self, size)
        finally:
            with lock:
                in_flight[0] -= 1
    monkeypatch.setattr(readers.NoTrailingCR, "read", slow_read)
    item = TableFile(str(path), path.name, path.stat().st_size, 0, "text", read_head(str(path), ","))
    blocks = readers.read_blocks(item, [0, 1], ",")
    next(blocks)
    blocks.close()          # what an error in the consumer does to the generator
    assert in_flight[0] == 0
