"""An epoch stopped after k batches, its StatefulDataLoader state saved and loaded in a new process,
yields exactly the rest of an uninterrupted epoch: 1 and 2 ranks, 0 and 2 workers."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchdata.stateful_dataloader")
REPO = Path(__file__).resolve().parents[2]


def _run(*args: object) -> dict:
    out = Path(str(args[1]))
    subprocess.run([sys.executable, "-m", "tests.training.resume_run", *map(str, args)], cwd=REPO, check=True,
                   timeout=300)
    return json.loads(out.read_text())


@pytest.mark.parametrize("fmt", ["pt"])
@pytest.mark.parametrize("ranks, workers, stop", [(1, 0, 3), (1, 2, 5), (2, 0, 2), (2, 2, 4)])
def test_resume_in_a_new_process_yields_the_rest_of_the_epoch(dataset_dir: Path, tmp_path: Path, ranks: int,
                                                              workers: int, stop: int) -> None:
    state = tmp_path / "state.pt"
    first = _run(dataset_dir, tmp_path / "first.json", ranks, workers, stop, state)
    second = _run(dataset_dir, tmp_path / "second.json", ranks, workers, -1, state)
    everything = []
    for rank in map(str, range(ranks)):
        full, head, tail = first[rank]["full"], first[rank]["head"], second[rank]["tail"]
        assert len(full) == 120 // ranks and len(head) == stop * 8
        assert head + tail == full
        everything += full
    assert len(set(everything)) == 120       # the ranks together read the epoch exactly once
