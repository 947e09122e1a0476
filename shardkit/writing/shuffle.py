"""The writer's bounded shuffle: samples leave a buffer of `capacity` at seeded random points, so
an input larger than memory is written in a shuffled order with at most `capacity` samples held.

The order is a pure function of the seed and the number of inputs, never of their content: when
input k arrives at a full buffer, the sample in slot splitmix64(key + k) mod capacity leaves and k
takes its place; when the input ends, what is left leaves in a seeded permutation (order.py). So
after a crash the order can be replayed from the count of samples the kept shards hold, without
their bytes: which inputs those were, which ones the buffer still held, and how many leading
inputs the caller may skip (`resumed`).

What "shuffled" then means: a sample leaves at a geometric distance after it arrived (a mean of
`capacity` inputs later); an input in class order stays in class order at scales well beyond
`capacity` (docs/fields.md, "Order"). Shuffle at read time (ShardAwareSampler) for a uniform one.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import UsageError
from ..order import seed_key, seeded_permutation, splitmix64

#: Draws computed at once.
_BLOCK = 4096


class ShuffleBuffer:
    """push() each input in turn, get back the one that leaves (None while the buffer fills);
    drain() the rest at the end. capacity 0: inputs leave as they arrive (source order)."""

    def __init__(self, capacity: int, seed: int) -> None:
        if capacity < 0:
            raise UsageError(f"shuffle_buffer must be 0 or more, not {capacity}")
        self.capacity, self.seed = capacity, seed
        self.arrivals = 0
        self._slots: List[Any] = []
        self._key = seed_key((seed, 1))
        self._draws = np.zeros(0, dtype=np.int64)
        self._first_draw = 0
        #: resuming: inputs before `_replay_until` are the interrupted run's; those in `_refill` go
        #: back to their slots, the others were written already
        self._replay_until = 0
        self._refill: Dict[int, int] = {}
        #: resuming after the input had ended: its length, and the slots still to leave, in order
        self._end: Optional[int] = None
        self._drain_order: Optional[List[int]] = None

    def draw(self, arrival: int) -> int:
        """The slot that input `arrival` takes (the one whose sample leaves)."""
        offset = arrival - self._first_draw
        if not 0 <= offset < len(self._draws):
            self._first_draw = arrival
            with np.errstate(over="ignore"):
                keys = splitmix64(np.arange(arrival, arrival + _BLOCK, dtype=np.uint64) + np.uint64(self._key))
            self._draws = (keys % np.uint64(self.capacity)).astype(np.int64)
            offset = 0
        return int(self._draws[offset])

    def push(self, item: Any) -> Any:
        """Take the next input; the sample that leaves now, or None."""
        arrival = self.arrivals
        self.arrivals += 1
        if arrival < self._replay_until:
            slot = self._refill.pop(arrival, None)
            if slot is not None:
                self._slots[slot] = item
            return None
        if self._end is not None and arrival >= self._end:
            raise UsageError(f"the input holds more than the {self._end} samples of the interrupted run it "
                             "resumes; resume with the same input")
        if len(self._slots) < self.capacity:
            self._slots.append(item)
            return None
        if not self.capacity:
            return item
        slot = self.draw(arrival)
        leaving, self._slots[slot] = self._slots[slot], item
        return leaving

    def drain(self) -> Iterator[Any]:
        """The samples still held, in a seeded permutation (the input has ended)."""
        if self._refill or self.arrivals < self._replay_until:
            raise UsageError(f"the input ended after {self.arrivals} samples, before the ones the interrupted "
                             f"run held ({self._replay_until}); resume with the same input")
        order = self._drain_order
        if order is None:
            order = seeded_permutation(len(self._slots), (self.seed, 2, self.arrivals)).tolist()
        slots, self._slots = self._slots, []
        for slot in order:
            yield slots[slot]

    @classmethod
    def resumed(cls, capacity: int, seed: int, emitted: int, end: Optional[int]) -> Tuple["ShuffleBuffer", int]:
        """A buffer in the state a run had after `emitted` samples left it (end: the input's length
        when it had ended by then, else None), and how many leading inputs the caller may skip:
        the inputs from there on are given again, and those already written are dropped."""
        buffer = cls(capacity, seed)
        buffer._end = end
        if not emitted or not capacity:
            buffer.arrivals = buffer._replay_until = emitted
            return buffer, emitted
        arrivals = emitted + capacity if end is None else end
        drained = 0 if end is None else emitted - max(0, end - capacity)
        if not 0 <= drained <= min(capacity, arrivals):
            raise UsageError(f"the kept shards hold {emitted} samples, which no run of {end} inputs wrote")
        positions = list(range(min(capacity, arrivals)))
        for arrival in range(capacity, arrivals):
            positions[buffer.draw(arrival)] = arrival
        if end is not None:
            order = seeded_permutation(len(positions), (seed, 2, end)).tolist()[drained:]
            buffer._drain_order = list(range(len(order)))
            positions = [positions[slot] for slot in order]
        buffer._slots = [None] * len(positions)
        buffer._refill = {position: slot for slot, position in enumerate(positions)}
        buffer._replay_until = arrivals
        buffer.arrivals = min(positions) if positions else arrivals
        return buffer, buffer.arrivals
