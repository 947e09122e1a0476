"""Shard writing as Ray tasks (--executor ray): one task per planned shard, on any node.

Each task runs the same sink as a local worker (sink.write_shard: temporary name, fsync, rename,
done record), so DST must be a file system that every node mounts at the same path. The driver
(this process) waits for the tasks, shows progress by finished shards, and leaves the manifest
to conversion.py, which writes it last. Ray retries a task whose worker process or node was lost
up to `retries` times (a rerun unlinks the lost attempt's temporary file first); an error raised
by the shard itself (--on-error fail, a full disk) is not retried. Killing the driver loses no
finished shard: `--resume` reuses every shard with a done record.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional

from ..errors import ConversionError, ShardkitError, UsageError
from .plan import ShardTask
from .sink import ShardResult, SinkContext, write_shard
from ..runtime.workers import POLL_SECONDS

#: How many times Ray reruns a shard whose worker or node was lost.
RETRIES = 3


def write_shard_task(ctx: SinkContext, task: ShardTask) -> ShardResult:
    """The Ray task body: one shard through the sink."""
    return write_shard(ctx, task)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray on this machine and every node: "
                         "pip install 'shardkit[ray]'") from None
    return ray


def run_on_ray(ctx: SinkContext, tasks: List[ShardTask], address: Optional[str],
               on_result: Callable[[ShardResult], None], on_progress: Callable[[int, int], None],
               retries: int = RETRIES, quiet: bool = True) -> None:
    """Write tasks as Ray tasks on the cluster at `address` (None: a Ray already initialised in
    this process, else a local one started for this run), calling on_result as each ends and
    on_progress(items, source bytes) between waits (where a Ctrl-C is raised). quiet: Ray's own
    loggers say only errors while it starts (no banner, no notice about its token)."""
    ray = _ray()
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=quiet,
                     logging_level=logging.ERROR if quiet else logging.INFO)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UsageError(f"cannot reach a Ray cluster at {address or 'a new local one'} ({exc})") from None
    remote = ray.remote(max_retries=retries, retry_exceptions=False)(write_shard_task)
    shared = ray.put(ctx)
    pending: Dict[Any, ShardTask] = {remote.remote(shared, task): task for task in tasks}
    items = nbytes = 0
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
            on_progress(items, nbytes)
            for ref in ready:
                task = pending.pop(ref)
                result = _result(ray, ref, task, ctx, retries)
                items += result.num_samples + len(result.skipped)
                nbytes += result.source_bytes
                on_result(result)
        on_progress(items, nbytes)
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()


def _result(ray: Any, ref: Any, task: ShardTask, ctx: SinkContext, retries: int) -> ShardResult:
    """The task's ShardResult; its own error as raised in the task, or a ConversionError."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, ShardkitError):
            raise cause from None
        raise ConversionError(f"failed on Ray ({cause or exc})", path=ctx.dst, shard=task.name) from None
    except ray.exceptions.RayError as exc:
        raise ConversionError(f"was lost {retries + 1} times on Ray "
                              f"({type(exc).__name__}); finished shards are kept — run the same command "
                              "with --resume", path=ctx.dst, shard=task.name) from None


__all__ = ["RETRIES", "run_on_ray", "write_shard_task"]
