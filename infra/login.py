"""A one-use link that logs a browser in to a Ray dashboard with token auth.

Ray 2.60's dashboard takes the token from the Authorization header or from its own cookie
`ray-authentication-token` (ray/_private/authentication/http_token_authentication.py); its login form
POSTs the token to /api/authenticate, which sets that cookie (ray/dashboard/http_server_head.py). A URL
cannot carry a header, and Ray reads no token from the URL, but cookies belong to a host, not a port
(RFC 6265 §8.5): a tiny server on the dashboard's own loopback host sets Ray's cookie and redirects to
the dashboard. The link holds a random key, never the token; it works once, for a few minutes.
"""
from __future__ import annotations

import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

COOKIE = "ray-authentication-token"  # ray._private.authentication.authentication_constants
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


def can_log_in(dashboard_url: str) -> bool:
    """Only a dashboard on this machine's loopback (the local head, or an SSH tunnel's end) shares its
    cookie host with a server dlrun can run."""
    return urlparse(dashboard_url).hostname in LOOPBACK_HOSTS


class LoginLink:
    def __init__(self, target_url: str, token: str, *, ttl_s: float = 300.0):
        if not can_log_in(target_url):
            raise ValueError(f"{target_url} is not on this machine's loopback")
        self.target_url, self._token, self.ttl_s = target_url, token, ttl_s
        self._key = secrets.token_urlsafe(24)
        self._expires = time.monotonic() + ttl_s
        self.used = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> "LoginLink":
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("LoginLink.url before start()")
        host = urlparse(self.target_url).hostname
        return f"http://{host}:{self._server.server_address[1]}/login/{self._key}"

    def wait(self, timeout: float | None = None) -> bool:
        """True once the link was used; False when it expired (or timeout passed) first."""
        left = self._expires - time.monotonic()
        return self.used.wait(left if timeout is None else min(timeout, left))

    def close(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _redeem(self, path: str) -> bool:
        """The one login this link allows (constant-time key check)."""
        key = path.rpartition("/login/")[2]
        ok = (secrets.compare_digest(key, self._key) and not self.used.is_set()
              and time.monotonic() < self._expires)
        if ok:
            self.used.set()
        return ok

    def __enter__(self) -> "LoginLink":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _handler_for(link: LoginLink):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if not self.path.startswith("/login/") or not link._redeem(self.path):
                body = b"This dlrun login link was already used or has expired: run `dlrun dashboard` again.\n"
                self.send_response(410)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(303)
            # what Ray's /api/authenticate sets, for the whole host (every port: the head, its tunnels)
            self.send_header("Set-Cookie", f"{COOKIE}={link._token}; Path=/; HttpOnly; SameSite=Strict")
            self.send_header("Location", link.target_url)
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    return Handler
