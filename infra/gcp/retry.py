"""Retries for Compute Engine's per-minute API rate limits: every client call dlrun makes goes through one.

GCE answers a call over its API rate quota with 403 `rateLimitExceeded` / `userRateLimitExceeded` or
429 (cloud.google.com/compute/api-quotas, "Rate quotas"; the quota refills each minute). google-api-core's
default retry for the compute REST clients covers neither. Such a call is retried with exponential
backoff and jitter, bounded (RATE_LIMIT_TRIES, at most RATE_LIMIT_MAX_S between tries, about three
minutes in all); what still fails is mapped by errors.py to a ProvisionError for this offer, never to
credentials. A rejected call made nothing, so retrying an insert is safe. (A list's later pages are
fetched by its pager, outside this wrapper: they are not retried.)
"""
from __future__ import annotations

import random
import time

from google.api_core import exceptions as gexc

from infra.gcp import errors as gcp_errors

RATE_LIMIT_TRIES = 8
RATE_LIMIT_BASE_S, RATE_LIMIT_MAX_S = 2.0, 60.0


def is_rate_limited(e: BaseException) -> bool:
    return isinstance(e, gexc.GoogleAPICallError) and gcp_errors.is_rate_limit(
        e.code, gcp_errors.api_codes(e), e.message or "")


def backoff_s(attempt: int) -> float:
    """Full-jitter exponential backoff: a random share of min(max, base * 2^attempt)."""
    return random.uniform(0.5, 1.0) * min(RATE_LIMIT_MAX_S, RATE_LIMIT_BASE_S * 2 ** attempt)


class RateLimited:
    """A client whose methods retry rate-limited calls (the same methods, the same answers)."""

    def __init__(self, client, sleep=time.sleep, tries: int = RATE_LIMIT_TRIES):
        self._client, self._sleep, self._tries = client, sleep, tries

    def __getattr__(self, name: str):
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args, **kwargs):
            for attempt in range(self._tries):
                try:
                    return attr(*args, **kwargs)
                except gexc.GoogleAPICallError as e:
                    if not is_rate_limited(e) or attempt == self._tries - 1:
                        raise
                    self._sleep(backoff_s(attempt))
            raise AssertionError("unreachable")
        return call
