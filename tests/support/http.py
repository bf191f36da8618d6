"""The threaded HTTP server under the fakes and stand-ins (fake GCS and Compute Engine, dashboards):
one home for starting it on a free port of 127.0.0.1, its endpoint, and stopping it.

    with LocalHttpServer(Handler) as server:        # a stand-in with a handler class
        urlopen(server.endpoint + "/api/version")

A fake that builds its handler from its own state subclasses it and overrides make_handler(); its handler
class derives from QuietHandler (no access log on the test output; reply() sends a whole answer)."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    def reply(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # keep test output quiet
        pass


class LocalHttpServer:
    poll_interval_s = 0.5  # how quickly stop() returns (serve_forever's poll)
    _server: ThreadingHTTPServer | None = None
    _handler: type[BaseHTTPRequestHandler] | None = None

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self._handler = handler

    def make_handler(self) -> type[BaseHTTPRequestHandler]:
        return self._handler

    def start(self):
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self.make_handler())
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": self.poll_interval_s},
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"
