"""Fixed points where a test kills the process that reaches them, so a fault lands at a known
moment instead of when a polling test happens to look. Nothing happens unless the environment
variable below is set, which only the test suite does (tests/integration/test_ray_executor.py).

SHARDKIT_TEST_KILL_AT="<point>:<key>:<marker file>": the first process to reach `point` for
`key` creates the marker file (exclusively) and kills itself with SIGKILL; later ones (a retry)
find the marker and go on.
"""
from __future__ import annotations

import os
import signal

KILL_AT = "SHARDKIT_TEST_KILL_AT"


def kill_point(point: str, key: str) -> None:
    """SIGKILL this process if the test set this point and key, the first time only."""
    setting = os.environ.get(KILL_AT)
    if not setting or setting.split(":", 2)[:2] != [point, key]:
        return
    try:
        os.close(os.open(setting.split(":", 2)[2], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["KILL_AT", "kill_point"]
