"""A fake instance metadata service (the boundary jobs/notice.py talks to): AWS IMDSv2 and GCE.

AWS: PUT /latest/api/token (X-aws-ec2-metadata-token-ttl-seconds) gives a session token; every GET
needs it in X-aws-ec2-metadata-token (401 otherwise, as IMDSv2 with tokens required);
/latest/meta-data/spot/instance-action is 404 until `notice()` posts one, then its JSON.
GCE: GET /computeMetadata/v1/instance/preempted needs `Metadata-Flavor: Google` (403 otherwise) and
answers FALSE, then TRUE after `notice()`.
"""
from __future__ import annotations

import http.server
import json
import secrets
import threading
import time


class MetadataServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.tokens: set[str] = set()
        self.instance_action: dict | None = None
        self.preempted = False
        self.requests: list[tuple[str, str]] = []
        server = self

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
                server.requests.append(("PUT", self.path))
                if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    token = secrets.token_urlsafe(16)
                    server.tokens.add(token)
                    return self._send(200, token)
                self._send(400)

            def do_GET(self):
                server.requests.append(("GET", self.path))
                if self.path.startswith("/latest/"):
                    if self.headers.get("X-aws-ec2-metadata-token") not in server.tokens:
                        return self._send(401)
                    if self.path == "/latest/meta-data/spot/instance-action":
                        if server.instance_action is None:
                            return self._send(404)
                        return self._send(200, json.dumps(server.instance_action))
                    return self._send(404)
                if self.path.startswith("/computeMetadata/v1/"):
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self._send(403)
                    if self.path.split("?")[0] == "/computeMetadata/v1/instance/preempted":
                        return self._send(200, "TRUE" if server.preempted else "FALSE")
                return self._send(404)

        self.httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def notice(self) -> None:
        """The cloud is taking the VM: AWS posts instance-action two minutes ahead, GCE flips preempted."""
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        self.instance_action = {"action": "terminate", "time": when}
        self.preempted = True

    def __enter__(self) -> "MetadataServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
