"""SharedFolderSync: every caller returns only after an fsync of the folder that began after its
call (so it covers the rename the caller made just before), and callers that arrive while an fsync
runs share the next one instead of queueing one each."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import List, Tuple

import pytest

from shardkit import integrity
from shardkit.integrity import SharedFolderSync

CALLERS = 6


def _spied(monkeypatch: pytest.MonkeyPatch, first_fsync_waits: threading.Event,
           fail_first: bool = False) -> List[Tuple[str, int]]:
    """Events ('begin'|'end', n) of every real fsync; the first one waits for first_fsync_waits."""
    events: List[Tuple[str, int]] = []
    lock = threading.Lock()
    real = integrity.fsync_path

    def fsync_path(path: "os.PathLike[str] | str") -> None:
        with lock:
            number = sum(1 for kind, _ in events if kind == "begin")
            events.append(("begin", number))
        if number == 0:
            first_fsync_waits.wait(10)
            if fail_first:
                raise OSError(5, "Input/output error")
        real(path)
        with lock:
            events.append(("end", number))

    monkeypatch.setattr(integrity, "fsync_path", fsync_path)
    return events


def _run_callers(sync: SharedFolderSync, folder: Path, events: List[Tuple[str, int]], release: threading.Event,
                 ) -> Tuple[List[Tuple[int, int]], List[BaseException]]:
    """CALLERS threads call sync(folder); the first fsync is held until all have called. Returns the
    (event count at call, event count at return) of each and the errors raised."""
    spans: List[Tuple[int, int]] = []
    errors: List[BaseException] = []
    lock = threading.Lock()

    def caller() -> None:
        with lock:
            called = len(events)
        try:
            sync(folder)
        except OSError as exc:
            with lock:
                errors.append(exc)
            return
        with lock:
            spans.append((called, len(events)))

    first = threading.Thread(target=caller)
    first.start()
    while not events:                    # the first caller's fsync has begun and is held
        threading.Event().wait(0.001)
    others = [threading.Thread(target=caller) for _ in range(CALLERS - 1)]
    for thread in others:
        thread.start()
    while sync._tickets < CALLERS:       # every caller is inside sync(), waiting
        threading.Event().wait(0.001)
    release.set()
    for thread in [first, *others]:
        thread.join(10)
    return spans, errors


def test_each_caller_is_covered_by_an_fsync_begun_after_its_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    events = _spied(monkeypatch, release)
    spans, errors = _run_callers(SharedFolderSync(), tmp_path, events, release)
    assert errors == [] and len(spans) == CALLERS
    for called, returned in spans:
        begun_after = {n for kind, n in events[called:returned] if kind == "begin"}
        ended_before = {n for kind, n in events[:returned] if kind == "end"}
        assert begun_after & ended_before, (called, returned, events)
    # the five that came while the first fsync ran share one more: two fsyncs in all, not six
    assert [kind for kind, _ in events] == ["begin", "end", "begin", "end"]


def test_a_failed_fsync_fails_its_caller_and_the_others_sync_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    events = _spied(monkeypatch, release, fail_first=True)
    spans, errors = _run_callers(SharedFolderSync(), tmp_path, events, release)
    assert len(errors) == 1 and len(spans) == CALLERS - 1
    for called, returned in spans:
        assert any(kind == "end" for kind, _ in events[called:returned])
