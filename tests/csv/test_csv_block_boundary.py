"""A quoted CR LF whose CR is the last byte of one Arrow block and whose LF starts the next."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import shardkit
from shardkit.sources.tabular import readers
from shardkit.sources.tabular.files import TableFile, read_head
from shardkit.sources.tabular.values import strings

ROWS = [["xxxxxxxxxx", "yyyyyyyyyy"], ["ppppp", "q\r\n"], ["z", "w\r\r\nv"], ["end", "\r\n"]]


def _csv_bytes(rows) -> bytes:
    buffer = io.StringIO(newline="")
    csv.writer(buffer, lineterminator="\r\n").writerows(rows)
    return buffer.getvalue().encode("utf-8")


def _read(path: Path) -> list:
    item = TableFile(str(path), path.name, path.stat().st_size, 0, "text", read_head(str(path), ","))
    return [list(pair) for block in readers.read_blocks(item, [0, 1], ",")
            for pair in zip(*(strings(array) for array in block.arrays))]


def test_every_block_size_keeps_quoted_crlf(tmp_path, monkeypatch):
    """Each block size from 16 to 64 bytes puts some block end at every byte, the CRs included."""
    path = tmp_path / "t.csv"
    path.write_bytes(_csv_bytes([["a", "b"]] + ROWS))
    for size in range(16, 65):
        monkeypatch.setattr(readers, "BLOCK_BYTES", size)
        assert _read(path) == ROWS, f"block size {size}"


def test_conversion_keeps_a_crlf_that_straddles_the_first_block(tmp_path):
    """End to end, real block size: the CR of a quoted CR LF is byte BLOCK_BYTES - 1 of the data rows."""
    filler = ["k", "x" * 98]                        # 'k,' + 98 + CR LF = 102 bytes a row
    count = (readers.BLOCK_BYTES - 200) // 102
    pad = readers.BLOCK_BYTES - 1 - 3 - count * 102  # the target row starts 'k,"', then pad bytes, then CR
    rows = [filler] * count + [["k", "y" * pad + "\r\n"], ["k", "after"]]
    data = _csv_bytes(rows)
    assert data[readers.BLOCK_BYTES - 1:readers.BLOCK_BYTES + 1] == b"\r\n"
    src = tmp_path / "big.csv"
    src.write_bytes(b"kind,note\r\n" + data)
    dst = tmp_path / "dst"
    shardkit.convert(str(src), str(dst), format="hdf5", no_labels=True, text_columns=["note"], quiet=True)
    ds = shardkit.open_dataset(str(dst), as_dict=True)
    assert len(ds) == count + 2
    assert ds[count]["note"] == "y" * pad + "\r\n"
    assert ds[count + 1]["note"] == "after"
