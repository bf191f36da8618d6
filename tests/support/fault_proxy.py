"""A stand-in for the network and the front ends between dlrun and a cloud API: an HTTP proxy in front of a
fake (moto's server, tests/support/aws_api_server.py, gce_catalog_server.py, billing_catalog_server.py) that
forwards every request, except the operation a test gives a fault, which it answers the way real APIs and
networks fail. The real clients (botocore, google-cloud-compute's REST transport, requests) talk to it.

    with FaultProxy(upstream_endpoint, "ec2") as proxy:          # "ec2" | "aws-json" | "google"
        proxy.inject("DescribeSpotPriceHistory", "cut_off")      # every call of it, until clear()
        proxy.hits["DescribeSpotPriceHistory"]                    # how many calls it saw

Faults (FAULTS), each as the service writes it:
- http500, http503: EC2's XML error document (InternalError, Unavailable), the JSON protocols'
  {"__type", "message"} (InternalFailure, ServiceUnavailable), Google's {"error": {code, status, message,
  errors[]}} (INTERNAL, UNAVAILABLE) (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html,
  cloud.google.com/apis/design/errors);
- throttled: EC2 503 RequestLimitExceeded, Price List 400 ThrottlingException, Service Quotas 400
  TooManyRequestsException, Google 429 RESOURCE_EXHAUSTED with reason rateLimitExceeded;
- reset: the request is read, then the connection is closed with a TCP RST (SO_LINGER 0);
- read_timeout: the request is read and nothing is answered for `hold_s` (longer than any read timeout the
  tests set), then the connection is closed;
- cut_off: the real answer with HTTP 200, cut after half its bytes (Content-Length says the cut length, as a
  proxy that truncates does);
- empty: HTTP 200 with an empty body;
- wrong_shape: HTTP 200 with a well-formed document that is not the operation's answer (XML for EC2, JSON
  for the others);
- repeat_token: the real answer with its page token replaced by one that never changes; a request that
  sends that token back gets the first page again (the listing never ends).
Besides the matrix's faults, `refused`: the credentials refused (EC2 401 AuthFailure, the JSON protocols' 400
UnrecognizedClientException, Google's 403 forbidden).
Not reproduced: TLS, slow bodies (bytes trickling in), HTTP/2, redirects, partial faults (1 in N calls).
"""
from __future__ import annotations

import http.client
import io
import json
import re
import socket
import struct
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlparse

from tests.support.http import LocalHttpServer, QuietHandler

FAULTS = ("http500", "http503", "throttled", "reset", "read_timeout", "cut_off", "empty", "wrong_shape",
          "repeat_token")
TOKEN = "same-token-again"
GOOGLE_OPS = {"": "projects.get", "/regions": "regions.list",
              "/aggregated/machineTypes": "machineTypes.aggregatedList",
              "/aggregated/acceleratorTypes": "acceleratorTypes.aggregatedList"}


@dataclass
class FaultProxy(LocalHttpServer):
    upstream: str = ""
    protocol: str = "google"          # ec2 | aws-json | google
    hold_s: float = 3.0               # how long read_timeout keeps a request unanswered
    faults: dict[str, str] = field(default_factory=dict)     # operation -> fault
    hits: dict[str, int] = field(default_factory=dict)       # operation -> calls seen
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self):
        LocalHttpServer.__init__(self, None)

    def inject(self, operation: str, fault: str) -> None:
        assert fault in (*FAULTS, "refused"), fault
        self.faults[operation] = fault

    def clear(self) -> None:
        self.faults.clear()
        self.hits.clear()

    def stop(self) -> None:
        self._stopping.set()
        super().stop()

    def make_handler(self):
        return _handler_for(self)

    # ---- what a request is
    def operation(self, method: str, path: str, headers, body: bytes) -> str:
        target = headers.get("X-Amz-Target")
        if target:
            return target.rpartition(".")[2]
        if self.protocol == "ec2":
            return dict(parse_qsl(body.decode())).get("Action", "?")
        url = urlparse(path).path
        if "/skus" in url:
            return "services.skus.list"
        m = re.match(r"/compute/v1/projects/[^/]+(.*)$", url)
        return GOOGLE_OPS.get(m.group(1), url) if m else url

    # ---- the faults' answers
    def error(self, fault: str, operation: str) -> tuple[int, bytes, str]:
        if self.protocol == "ec2":
            status, code = {"http500": (500, "InternalError"), "http503": (503, "Unavailable"),
                            "throttled": (503, "RequestLimitExceeded"), "refused": (401, "AuthFailure")}[fault]
            body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
                    f"<Message>{code} (injected)</Message></Error></Errors>"
                    "<RequestID>fault-proxy</RequestID></Response>")
            return status, body.encode(), "text/xml;charset=UTF-8"
        if self.protocol == "aws-json":
            throttle = "ThrottlingException" if operation == "GetProducts" else "TooManyRequestsException"
            status, code = {"http500": (500, "InternalFailure"), "http503": (503, "ServiceUnavailable"),
                            "throttled": (400, throttle), "refused": (400, "UnrecognizedClientException")}[fault]
            return status, json.dumps({"__type": code, "message": f"{code} (injected)"}).encode(), \
                "application/x-amz-json-1.1"
        status, state, reason = {"http500": (500, "INTERNAL", "backendError"),
                                 "http503": (503, "UNAVAILABLE", "backendError"),
                                 "throttled": (429, "RESOURCE_EXHAUSTED", "rateLimitExceeded"),
                                 "refused": (403, "PERMISSION_DENIED", "forbidden")}[fault]
        body = {"error": {"code": status, "status": state, "message": f"{state} (injected)",
                          "errors": [{"message": f"{state} (injected)", "domain": "global", "reason": reason}]}}
        return status, json.dumps(body).encode(), "application/json; charset=UTF-8"

    def wrong_shape(self) -> tuple[bytes, str]:
        if self.protocol == "ec2":
            return (b'<?xml version="1.0" encoding="UTF-8"?>\n<Result xmlns="http://ec2.amazonaws.com/doc/'
                    b'2016-11-15/"><requestId>fault-proxy</requestId><status>ok</status></Result>',
                    "text/xml;charset=UTF-8")
        return json.dumps({"result": [], "status": "ok"}).encode(), "application/json"

    def without_token(self, path: str, body: bytes, headers) -> tuple[str, bytes]:
        """The request as the fake would get it without the repeated page token (it answers the first page)."""
        if self.protocol == "ec2":
            form = [(k, v) for k, v in parse_qsl(body.decode()) if k != "NextToken"]
            return path, urlencode(form).encode()
        if self.protocol == "aws-json":
            data = json.loads(body or b"{}")
            data.pop("NextToken", None)
            return path, json.dumps(data).encode()
        url = urlparse(path)
        query = [(k, v) for k, v in parse_qsl(url.query) if k != "pageToken"]
        return url.path + ("?" + urlencode(query) if query else ""), body

    def with_token(self, body: bytes) -> bytes:
        if self.protocol == "ec2":
            text = body.decode()
            if "<nextToken>" in text:
                return re.sub(r"<nextToken>.*?</nextToken>", f"<nextToken>{TOKEN}</nextToken>", text).encode()
            end = text.rindex("</")
            return (text[:end] + f"<nextToken>{TOKEN}</nextToken>" + text[end:]).encode()
        data = json.loads(body)
        data["NextToken" if self.protocol == "aws-json" else "nextPageToken"] = TOKEN
        return json.dumps(data).encode()

    def forward(self, method: str, path: str, headers, body: bytes) -> tuple[int, bytes, str]:
        up = urlparse(self.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
        try:
            sent = {k: v for k, v in headers.items() if k.lower() not in ("connection", "content-length",
                                                                           "accept-encoding")}
            conn.request(method, path, body=body or None, headers=sent)
            r = conn.getresponse()
            return r.status, r.read(), r.getheader("Content-Type") or "application/octet-stream"
        finally:
            conn.close()


class _Handler(QuietHandler):
    protocol_version = "HTTP/1.1"
    proxy: FaultProxy

    def _serve(self):
        try:
            self._answer()
        except OSError:  # the client gave up first (its read timeout): nothing to answer, nothing to print
            self.close_connection = True
            self.wfile = io.BytesIO()

    def _answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        op = self.proxy.operation(self.command, self.path, self.headers, body)
        with self.proxy._lock:
            self.proxy.hits[op] = self.proxy.hits.get(op, 0) + 1
            fault = self.proxy.faults.get(op)
        if fault in ("reset", "read_timeout"):
            if fault == "read_timeout":
                self.proxy._stopping.wait(self.proxy.hold_s)
            self._reset()
        elif fault in ("http500", "http503", "throttled", "refused"):
            self.reply(*self.proxy.error(fault, op))
        elif fault == "empty":
            self.reply(200, b"", "application/json" if self.proxy.protocol != "ec2" else "text/xml;charset=UTF-8")
        elif fault == "wrong_shape":
            self.reply(200, *self.proxy.wrong_shape())
        else:
            self.reply(*self._forwarded(fault, body))

    def _forwarded(self, fault: str | None, body: bytes) -> tuple[int, bytes, str]:
        path = self.path
        if fault == "repeat_token":
            path, body = self.proxy.without_token(path, body, self.headers)
        status, data, ctype = self.proxy.forward(self.command, path, self.headers, body)
        if fault == "cut_off" and status == 200:
            data = data[:len(data) // 2]
        elif fault == "repeat_token" and status == 200:
            data = self.proxy.with_token(data)
        return status, data, ctype

    def _reset(self):
        """Close with a TCP RST, answering nothing."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True
        self.wfile = io.BytesIO()  # what the handler would still write goes nowhere

    do_GET = do_POST = _serve


def _handler_for(proxy: FaultProxy):
    return type("Handler", (_Handler,), {"proxy": proxy})
