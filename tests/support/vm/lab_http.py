"""What the lab's HTTP mirrors share (package_index.py, apt_mirror.py): a threaded HTTP/1.1 server on the
bridge answering GET and HEAD from an `answer(path)` function, files sent with sendfile, every request logged.

HTTP/1.1 with Content-Length on every answer: pip, uv and apt keep one connection for many requests (apt
pipelines them), as they do with PyPI and deb.debian.org. The listen backlog is a web server's (nginx: 511),
not socketserver's 5: uv opens dozens of connections at once on each VM, and with three VMs installing a
backlog of 5 overflowed (the kernel: "Possible SYN flooding on port ..."). (A VM failing to connect at all
while another lab ran was not this: its answers went to the other lab's VM of the same private IP; net.py.)
"""
from __future__ import annotations

import http.server
import threading
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlparse

BACKLOG = 511  # nginx's default `listen ... backlog` on Linux
Answer = tuple[int, bytes, str, "Path | None"]  # status, body, content type, a file to send instead of the body
MAX_LOGGED = 2000


def serve(host: str, port: int, answer: Callable[[str], Answer], requests: list[str],
          name: str) -> http.server.ThreadingHTTPServer:
    """Start serving on host:port (0: a free port; the server's server_address says which) in a daemon thread.
    `requests` gets a "METHOD /path status" line per request (the newest MAX_LOGGED kept)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet: the requests are kept in `requests`
            pass

        def do_HEAD(self):
            self.do_GET(head=True)

        def do_GET(self, head: bool = False):
            path = unquote(urlparse(self.path).path)
            status, body, ctype, file = answer(path)
            requests.append(f"{self.command} {path} {status}")
            del requests[:-MAX_LOGGED]
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(file.stat().st_size if file is not None else len(body)))
            self.end_headers()
            if head:
                return
            if file is None:
                self.wfile.write(body)
                return
            self.wfile.flush()
            with open(file, "rb") as f:
                self.connection.sendfile(f)

    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = BACKLOG
        daemon_threads = True

    server = Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, name=f"{name}-{server.server_address[1]}", daemon=True).start()
    return server


def stop(server: http.server.ThreadingHTTPServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()
