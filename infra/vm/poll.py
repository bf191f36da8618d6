"""One way to wait for something in the cloud: poll until a check says done, or a deadline passes."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

from infra.base import ProvisionError

T = TypeVar("T")


def poll_until(check: Callable[[], T | None], *, timeout_s: float, interval_s: float, what: str,
               cloud: str = "", backoff: float = 1.0, max_interval_s: float = 30.0,
               sleep: Callable[[float], None] = time.sleep) -> T:
    """The first truthy value of check(); ProvisionError naming `what` after timeout_s.

    check() may raise to stop early (a failure it recognises). backoff > 1 grows the interval.
    """
    deadline = time.monotonic() + timeout_s
    interval = interval_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise ProvisionError(f"{what} after {timeout_s:.0f}s", cloud=cloud)
        sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * backoff, max_interval_s)
