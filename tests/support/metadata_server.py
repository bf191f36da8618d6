"""A fake instance metadata service (the boundary jobs/notice.py talks to): AWS IMDSv2 and GCE.

AWS: PUT /latest/api/token (X-aws-ec2-metadata-token-ttl-seconds) gives a session token; every GET
needs it in X-aws-ec2-metadata-token (401 otherwise, as IMDSv2 with tokens required);
/latest/meta-data/spot/instance-action is 404 until `notice()` posts one, then its JSON;
/latest/meta-data/iam/security-credentials[/ROLE] answers the role's credentials when there is one.
GCE: GET /computeMetadata/v1/instance/preempted needs `Metadata-Flavor: Google` (403 otherwise) and
answers FALSE, then TRUE after `notice()`.

One handler (metadata_handler) serves both this server on 127.0.0.1 for the unit tests and each lab
VM's 169.254.169.254 (tests/support/vm/metadata.py).
"""
from __future__ import annotations

import http.server
import json
import secrets
import threading
import time
from typing import Callable

CREDENTIALS_PATH = "/latest/meta-data/iam/security-credentials"


class MetadataState:
    """What a metadata service knows and was asked: tokens handed out, the notice, the role (if any)."""

    def __init__(self, role: Callable[[], tuple[str, dict] | None] = lambda: None):
        self.tokens: set[str] = set()
        self.instance_action: dict | None = None
        self.preempted = False
        self.requests: list[tuple[str, str]] = []
        self.role = role  # () -> (role name, IMDS credential document) or None

    def notice(self) -> None:
        """The cloud is taking the VM: AWS posts instance-action two minutes ahead, GCE flips preempted."""
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        self.instance_action = {"action": "terminate", "time": when}
        self.preempted = True


def metadata_handler(state: MetadataState) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code: int, body: str = "") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self):
            state.requests.append(("PUT", self.path))
            if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                token = secrets.token_urlsafe(24)
                state.tokens.add(token)
                return self._send(200, token)
            self._send(400)

        def do_GET(self):
            state.requests.append(("GET", self.path))
            if self.path.startswith("/latest/"):
                if self.headers.get("X-aws-ec2-metadata-token") not in state.tokens:
                    return self._send(401)
                path = self.path.rstrip("/")
                if path == "/latest/meta-data/spot/instance-action":
                    if state.instance_action is None:
                        return self._send(404)
                    return self._send(200, json.dumps(state.instance_action))
                if path == CREDENTIALS_PATH or path.startswith(CREDENTIALS_PATH + "/"):
                    role = state.role()
                    if role is None:
                        return self._send(404)
                    name, creds = role
                    return self._send(200, name if path == CREDENTIALS_PATH else json.dumps(creds))
                return self._send(404)
            if self.path.startswith("/computeMetadata/v1/"):
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._send(403)
                if self.path.split("?")[0] == "/computeMetadata/v1/instance/preempted":
                    return self._send(200, "TRUE" if state.preempted else "FALSE")
            return self._send(404)

    return Handler


class MetadataServer(MetadataState):
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        super().__init__()
        self.httpd = http.server.ThreadingHTTPServer((host, port), metadata_handler(self))
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "MetadataServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
