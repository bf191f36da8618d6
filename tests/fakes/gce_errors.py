"""GCE-shaped API errors of the fake Compute Engine (tests/fakes/gce_server.py)."""
from __future__ import annotations

import re

NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


class ApiError(Exception):
    def __init__(self, code: int, message: str, reason: str):
        super().__init__(message)
        self.code, self.message, self.reason = code, message, reason

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message,
                          "errors": [{"message": self.message, "domain": "global", "reason": self.reason}]}}


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "invalid")
