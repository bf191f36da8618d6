"""A fake GCE metadata server that hands out the attached service account's access token, the way a
GCP node's google.auth finds its credentials (cloud.google.com/compute/docs/access/
authenticate-workloads#applications, metadata paths instance/service-accounts/default/...).

The token is "sa:EMAIL", which tests/fakes/gcs_server.py reads as that account. A process pointed at it
with GCE_METADATA_HOST and GCE_METADATA_IP (read by google.auth at import, so: a fresh process) is, to
google.auth.default(), a VM running as `email`.
"""
from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

from tests.fakes.http import LocalHttpServer


class FakeGceMetadata(LocalHttpServer):
    def __init__(self, email: str, project: str, scopes: list[str]):
        self.email, self.project, self.scopes = email, project, scopes
        self.requests: list[str] = []

    def make_handler(self):
        return _handler_for(self)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def answer(self, path: str) -> tuple[int, str, str]:
        base = "/computeMetadata/v1/"
        # the account answers as `default` and as its email, as on GCE: google.auth asks by email once it
        # knows it (a second refresh in the same process)
        accounts = [f"{base}instance/service-accounts/{name}/" for name in ("default", self.email)]
        if path == "/":
            return 200, "text/plain", ""
        if path == f"{base}project/project-id":
            return 200, "text/plain", self.project
        if path in accounts:  # ?recursive=true
            return 200, "application/json", json.dumps({"email": self.email, "scopes": self.scopes,
                                                        "aliases": ["default"]})
        if path in [f"{account}token" for account in accounts]:
            return 200, "application/json", json.dumps({"access_token": f"sa:{self.email}", "expires_in": 3599,
                                                        "token_type": "Bearer"})
        return 404, "text/plain", "not found"


def _handler_for(fake: FakeGceMetadata):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            fake.requests.append(path)
            if self.headers.get("Metadata-Flavor") != "Google":
                status, ctype, body = 403, "text/plain", "Missing Metadata-Flavor:Google header."
            else:
                status, ctype, body = fake.answer(path)
            data = body.encode()
            self.send_response(status)
            self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler
