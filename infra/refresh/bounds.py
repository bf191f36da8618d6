"""How long a read of the clouds' price, offer and quota APIs may take: every source (one API for one region,
or one global list) has a total deadline, retries are bounded, and every call has its own timeouts.

    Deadline        one source's budget (seconds), set by the caller: `dlrun catalog refresh` and
                    `dlrun catalog quotas` DLRUN_REFRESH_DEADLINE_S (60), a plan's own refresh and quota reads
                    DLRUN_PLAN_REFRESH_DEADLINE_S (5); no call starts (first try or retry) once it has passed
    call_timeouts   connect / read timeout of each call: a quarter (at most 5 s) and half (at most 20 s) of the
                    deadline, so that the call in flight when the deadline passes ends soon after it
    boto_config     botocore's adaptive retry mode (client-side rate limiting on throttling, backoff with
                    jitter), MAX_ATTEMPTS tries in all, and those timeouts
    gcp_retry       google-api-core's Retry for google-cloud-compute's calls and the Cloud Billing catalog's:
                    transient errors (429, 5xx, a 403 rateLimitExceeded, a reset or timed-out connection) are
                    retried with backoff, MAX_ATTEMPTS tries in all, never past the deadline

A source's worst case is thus its deadline plus one call's timeouts, plus botocore's backoff before a retry
after throttling (at most 2 s with 3 tries): 60 s -> at most 87 s; 5 s -> about 11 s.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from infra.refresh.answers import BillingError, DeadlineExceeded, UnreadableAnswer, describe

MAX_ATTEMPTS = 3  # tries of one call (the first and two retries), within the deadline


@dataclass
class Deadline:
    """Counted from the source's first call to the cloud (not from making its client: importing
    google-cloud-compute alone takes seconds on a small machine)."""

    seconds: float
    setting: str = "DLRUN_REFRESH_DEADLINE_S"   # the setting that gave it, for the user's line
    started: float | None = None
    last: BaseException | None = None           # the last failed try, for the user's line

    def left(self) -> float:
        if self.started is None:
            self.started = time.monotonic()
        return self.seconds - (time.monotonic() - self.started)

    def check(self) -> None:
        if self.left() <= 0:
            last = f"; the last try: {describe(self.last)}" if self.last is not None else ""
            raise DeadlineExceeded(f"no answer within its {self.seconds:g} s deadline ({self.setting}{last})")


def call_timeouts(seconds: float) -> tuple[float, float]:
    """(connect, read) timeout of one call under a deadline of `seconds`."""
    return min(5.0, seconds / 4), min(20.0, seconds / 2)


_local = threading.local()


@contextmanager
def running(deadline: Deadline) -> Iterator[Deadline]:
    """The source this thread reads now is bound by `deadline` (the clients' hooks look it up)."""
    before = getattr(_local, "deadline", None)
    _local.deadline = deadline
    try:
        yield deadline
    finally:
        _local.deadline = before


def current() -> Deadline | None:
    return getattr(_local, "deadline", None)


# ---- botocore ------------------------------------------------------------------------------------------

def boto_config(seconds: float, max_attempts: int = MAX_ATTEMPTS):
    from botocore.config import Config

    connect, read = call_timeouts(seconds)
    return Config(retries={"mode": "adaptive", "max_attempts": max_attempts}, connect_timeout=connect,
                  read_timeout=read, max_pool_connections=32)


def _no_call_past_the_deadline(**_) -> None:
    """before-send: botocore emits it for the first try and every retry; raising ends the call (an exception
    that is not a connection error is not retried)."""
    deadline = current()
    if deadline is not None:
        deadline.check()


def _json_or_unreadable(operation_model, response_dict, **_) -> None:
    """before-parse: botocore reads a JSON protocol's HTTP 200 body that is empty or not JSON (cut off) as an
    answer without any of its keys; say it is unreadable instead."""
    import json


    if response_dict.get("status_code") != 200 or \
            operation_model.service_model.resolved_protocol not in ("json", "rest-json"):
        return
    body = response_dict.get("body") or b""
    if not body.strip():
        raise UnreadableAnswer(f"{operation_model.name} answered HTTP 200 with an empty body")
    try:
        json.loads(body)
    except ValueError:
        raise UnreadableAnswer(f"{operation_model.name} answered HTTP 200 with {len(body)} bytes that are not "
                               "JSON (cut off?)") from None


def _remember_failure(response=None, caught_exception=None, operation=None, **_) -> None:
    """needs-retry: keep the try's failure on the deadline (its line says what the tries met)."""
    deadline = current()
    if deadline is None:
        return
    if caught_exception is not None:
        deadline.last = caught_exception
    elif response is not None and response[0] is not None and response[0].status_code >= 300:
        from botocore.exceptions import ClientError

        deadline.last = ClientError(response[1], getattr(operation, "name", "call"))


def bound_client(client):
    """Hook a boto3 client's calls to the deadline of the source being read, and its JSON answers to a check."""
    # last: after the adaptive mode's rate limiter has waited for its token
    client.meta.events.register_last("before-send", _no_call_past_the_deadline)
    client.meta.events.register_first("before-parse", _json_or_unreadable)
    client.meta.events.register_first("needs-retry", _remember_failure)
    return client


# ---- google-api-core ------------------------------------------------------------------------------------

def _transient(e: Exception) -> bool:
    import requests
    from google.api_core import exceptions as gexc
    from google.api_core.retry import if_transient_error


    if if_transient_error(e) or isinstance(e, requests.exceptions.Timeout):
        return True
    if isinstance(e, gexc.Forbidden):  # GCE's per-minute rate limit answers 403 rateLimitExceeded
        return any(isinstance(x, dict) and x.get("reason") in ("rateLimitExceeded", "userRateLimitExceeded")
                   for x in (e.errors or []))
    return isinstance(e, BillingError) and (e.status == 429 or e.status >= 500)


def gcp_retry(deadline: Deadline, tries: int = MAX_ATTEMPTS):
    """Retry transient errors with backoff (jittered, doubling): `tries` in all, never past the deadline.
    One Retry per call: it counts that call's tries."""
    from google.api_core.retry import Retry

    failures = 0

    def again(e: Exception) -> bool:
        nonlocal failures
        failures += 1
        return failures < tries and _transient(e)

    return Retry(predicate=again, initial=min(1.0, deadline.seconds / 10), maximum=deadline.seconds / 4,
                 multiplier=2.0, timeout=max(deadline.left(), 0.001))


# ---- one source's read ------------------------------------------------------------------------------------

def read_unit(cloud: str, kind: str, region: str, source: str, deadline: Deadline, read: Callable[[], list]):
    """A cache Unit of the rows `read` returns within the deadline; any failure (the cloud's error, a timeout,
    an unreadable or wrong-shaped answer) is a Unit without rows whose error says what went wrong."""
    from infra.refresh.cache import Unit

    tried = time.time()
    try:
        with running(deadline):
            rows = read()
    except Exception as e:  # noqa: BLE001 — a failed source keeps its previous rows (cache.save)
        try:
            why = describe(e)
        except Exception:  # noqa: BLE001 — the words must never cost the source's rows
            why = f"failed ({type(e).__name__}: {str(e)[:160]})"
        return Unit(cloud, kind, region, error=why, tried_at=tried)
    return Unit(cloud, kind, region, time.time(), source, rows, tried_at=tried)


def current_or_new(clients) -> Deadline:
    """The deadline of the source this thread reads (read_unit set it), else a new one from the clients'."""
    return current() or clients.deadline()
