"""What the readers accept from the clouds' APIs, and how a failed read is said in one line.

A reader checks the shape of every answer (the keys, types and units it relies on) before its rows can
replace anything: an answer without them raises ShapeError, one that cannot be read at all UnreadableAnswer,
and the source then fails (its previous rows stay, infra/refresh/cache.py). describe() turns any failure of
a read into the words of the user's line, starting with what kind of failure it was:

    refused          the cloud refused the credentials or the permission (HTTP 401/403, AuthFailure, ...)
    throttled        rate limited (429, ThrottlingException, RequestLimitExceeded, 403 rateLimitExceeded)
    unavailable      the service answered 5xx
    timed out        no answer within a call's read timeout, or within the source's deadline
    connection failed  the connection was refused, reset or closed mid-answer
    unreadable answer  HTTP 200 with an empty or cut-off body
    wrong shape      a readable answer without what the reader needs (or a page token that repeats)
    failed           anything else (the exception's type and text)
"""
from __future__ import annotations

REFUSED = "refused"
REFUSED_CODES = frozenset({"AuthFailure", "UnrecognizedClientException", "InvalidClientTokenId",
                           "SignatureDoesNotMatch", "AccessDenied", "AccessDeniedException", "UnauthorizedOperation",
                           "ExpiredToken", "ExpiredTokenException", "OptInRequired"})
THROTTLED_CODES = frozenset({"Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded",
                             "RequestThrottled", "RequestThrottledException", "SlowDown"})


class ShapeError(Exception):
    """A readable answer without the keys, types or units the reader relies on."""


class UnreadableAnswer(Exception):
    """HTTP 200 with a body that cannot be parsed (empty, cut off)."""


class DeadlineExceeded(Exception):
    """A source's reads ran past its deadline (bounds.Deadline says how long, and what the last try met)."""


class BillingError(Exception):
    """The Cloud Billing Catalog API answered an HTTP error."""

    def __init__(self, status: int, body: str):
        import json

        try:  # Google's error shape: {"error": {"code", "status", "message"}}
            error = json.loads(body)["error"]
            self.code, message = str(error.get("status") or ""), str(error.get("message") or "")
        except (ValueError, KeyError, TypeError, AttributeError):
            self.code, message = "", body
        super().__init__(message[:160])
        self.status = status


def need(answer, key: str, kind: type, what: str):
    """answer[key] when it is a `kind`, else ShapeError naming the call (`what`) and the key."""
    value = answer.get(key) if isinstance(answer, dict) else None
    if not isinstance(value, kind):
        got = "no such key" if not isinstance(answer, dict) or key not in answer else type(value).__name__
        raise ShapeError(f"{what} answered without a {kind.__name__} '{key}' ({got})")
    return value


def number(value, what: str) -> float:
    """A positive number the reader needs (strings of digits as the APIs send them are numbers too)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ShapeError(f"{what} is {value!r}, not a number") from None
    if not x > 0:
        raise ShapeError(f"{what} is {value!r}, not a positive number")
    return x


def is_refusal(error: str) -> bool:
    return error.startswith(REFUSED)


def describe(e: BaseException) -> str:
    """One failure of a read, in words: its kind first (the table above), then what the cloud said."""
    if isinstance(e, DeadlineExceeded):
        return f"timed out: {e}"
    if isinstance(e, ShapeError):
        return f"wrong shape: {e}"
    if isinstance(e, UnreadableAnswer):
        return f"unreadable answer: {e}"
    if isinstance(e, BillingError):
        return _by_status(e.status, e.code, str(e))
    return _botocore(e) or _google(e) or _transport(e) or f"failed ({type(e).__name__}: {str(e)[:160]})"


def _by_status(status: int, code: str, text: str) -> str:
    what = f"{code} " if code else ""
    if code in THROTTLED_CODES or status == 429:
        return f"throttled ({what}HTTP {status}): {text}"
    if code in REFUSED_CODES or status in (401, 403):
        return f"{REFUSED} ({what}HTTP {status}): {text}; check the credentials and their permissions"
    if status >= 500:
        return f"unavailable ({what}HTTP {status}): {text}"
    return f"failed ({what}HTTP {status}): {text}"


def _botocore(e: BaseException) -> str | None:
    try:
        from botocore import exceptions as bexc
        from botocore.parsers import ResponseParserError
    except ImportError:  # pragma: no cover - boto3 is a dependency
        return None
    if isinstance(e, bexc.ClientError):
        err = e.response.get("Error", {})
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return _by_status(int(status), err.get("Code", ""), str(err.get("Message", ""))[:160])
    if isinstance(e, ResponseParserError):
        return f"unreadable answer: HTTP 200 with a body that is not valid XML/JSON ({str(e).splitlines()[0][:120]})"
    if isinstance(e, (bexc.ReadTimeoutError, bexc.ConnectTimeoutError)):
        return f"timed out: {str(e)[:160]}"
    if isinstance(e, (bexc.ConnectionError, bexc.HTTPClientError)):
        return f"connection failed: {str(e)[:160]}"
    if isinstance(e, bexc.PaginationError):
        return f"wrong shape: {str(e)[:160]} (the listing would never end)"
    return None


def _google(e: BaseException) -> str | None:
    try:
        from google.api_core import exceptions as gexc
        from google.protobuf.json_format import ParseError
    except ImportError:  # pragma: no cover - google-cloud-compute is a dependency
        return None
    if isinstance(e, gexc.RetryError):
        cause = e.cause if e.cause is not None else e
        return f"{describe(cause) if cause is not e else 'failed'} (retried until the deadline)"
    if isinstance(e, gexc.GoogleAPICallError):
        reasons = {x.get("reason") for x in (e.errors or []) if isinstance(x, dict)}
        status = int(e.code or 0)
        if reasons & {"rateLimitExceeded", "userRateLimitExceeded"}:
            status = 429
        import re

        grpc_code = getattr(e, "grpc_status_code", None)
        code = grpc_code.name if grpc_code is not None else ""
        return _by_status(status, code, re.sub(r"^(GET|POST) \S+: ", "", str(e.message))[:160])
    if isinstance(e, ParseError):
        return f"unreadable answer: HTTP 200 with a body that is not the JSON expected ({str(e)[:120]})"
    return None


def _transport(e: BaseException) -> str | None:
    import requests

    if isinstance(e, requests.exceptions.Timeout):
        return f"timed out: {str(e)[:160]}"
    if isinstance(e, (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)):
        return f"connection failed: {str(e)[:160]}"
    if isinstance(e, ValueError):  # a JSON body that does not parse
        return f"unreadable answer: {str(e)[:160]}"
    return None
