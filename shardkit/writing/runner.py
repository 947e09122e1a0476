"""Writing a run's pending shards: in this process (a commit pipeline overlapping the fsyncs), in
local worker processes, or as Ray tasks, with a progress bar, --max-errors and Ctrl-C between
items and shards."""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, List, Optional

from ..errors import ConversionError
from ..options import RunOptions
from ..runtime.interrupt import SigintLatch
from ..runtime.progress import Progress
from ..sources import Skipped
from .commit import CommitPipeline
from .journal import remove_stale_temps
from .plan import ShardTask
from .sink import ShardResult, SinkContext, write_shard_file


def write_shards(ctx: SinkContext, tasks: List[ShardTask], options: RunOptions, already_skipped: int,
                 latch: SigintLatch) -> List[ShardResult]:
    """Write the pending shards, in this process or in worker processes, with a progress bar.

    --max-errors counts every skipped input of the run; in one process the limit is exact
    (the run stops at the input that exceeds it), with workers it is checked per shard too.
    """
    total = sum(task.stop - task.start for task in tasks)
    skipped = already_skipped
    results: List[ShardResult] = []

    def remaining() -> Optional[int]:
        return None if options.max_errors is None else options.max_errors - skipped

    def count_skipped(result: ShardResult) -> None:
        nonlocal skipped
        skipped += len(result.skipped)
        if options.max_errors is not None and skipped > options.max_errors:
            raise ConversionError(f"more than {options.max_errors} inputs failed (--max-errors); "
                                  f"last: {Skipped(**result.skipped[-1]).message()}")

    def check(result: ShardResult) -> None:
        count_skipped(result)
        results.append(result)

    with Progress(total, "convert", quiet=options.quiet) as bar:
        def advance(items: int, nbytes: int) -> None:
            latch.check()
            bar.advance(items, nbytes)

        def set_totals(items: int, nbytes: int) -> None:
            latch.check()
            bar.set(items, nbytes)

        if options.executor == "local" and (options.workers <= 1 or len(tasks) <= 1):
            # Ctrl-C is raised by latch.check() between items and shards, never inside a format
            # library's write (torch.save calling back into Python aborts the process on one).
            with CommitPipeline(interrupted=lambda: latch.hit) as pipeline, latch.deferred():
                for task in tasks:
                    latch.check()
                    written = write_shard_file(dataclasses.replace(ctx, max_errors=remaining()), task,
                                               progress=advance)
                    latch.check()       # a Ctrl-C during its close: not committed (its file is removed)
                    count_skipped(written.result)
                    for result in pipeline.submit(written):
                        results.append(result)
                results.extend(pipeline.finish())
        else:
            try:
                with latch.deferred():          # Ctrl-C is raised by set_totals, between the executor's waits
                    _executor(options)(dataclasses.replace(ctx, max_errors=remaining()), tasks,
                                       on_result=check, on_progress=set_totals)
            except BaseException:
                remove_stale_temps(ctx.dst)     # tasks stopped mid-shard leave their temporary files
                raise
            remove_stale_temps(ctx.dst)         # a lost task that was retried left its (randomly named) one
    return results


def _executor(options: RunOptions) -> Callable[..., None]:
    """run(ctx, tasks, on_result, on_progress) writing shards outside this process: spawned local
    workers (parallel.py) or Ray tasks (ray_executor.py), both through the same sink."""
    if options.executor == "ray":
        from .ray_executor import run_on_ray
        return functools.partial(run_on_ray, address=options.address, quiet=options.quiet)
    from .parallel import run_parallel
    return functools.partial(run_parallel, workers=options.workers)


__all__ = ["write_shards"]
