"""GCE-shaped API errors of the fake Compute Engine (tests/support/gce_server.py), and the resource names and
REST paths every part of it checks."""
from __future__ import annotations

import re

NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
PREFIX = "/compute/v1/projects/"  # where every Compute Engine REST path starts


STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
          412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


class ApiError(Exception):
    """GCE's JSON error body: {"error": {"code", "message", "errors": [{"message", "domain", "reason"}],
    "status"}} (cloud.google.com/compute/docs/api/how-tos/api-requests-responses#handling_api_errors)."""

    def __init__(self, code: int, message: str, reason: str, *, domain: str = "global"):
        super().__init__(message)
        self.code, self.message, self.reason, self.domain = code, message, reason, domain

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "status": STATUS.get(self.code, "UNKNOWN"),
                          "errors": [{"message": self.message, "domain": self.domain, "reason": self.reason}]}}


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "invalid")
