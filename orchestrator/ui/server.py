"""`dlrun ui`'s web server: aiohttp on 127.0.0.1 only, every request checked for the token its URL carries.

The token: a random 32-byte hex string made at start and printed in the URL (as notebook servers do).
A request is served only with it, as `?token=` in the URL or the `X-Dlrun-Token` header; without it the
answer is 401 and a line that names nothing of the jobs. A POST (Cancel, the only one) must carry it in
the header, which a page of another origin cannot set without a CORS preflight this server never
answers, and an Origin header, when the browser sends one, must be this server's own.
"""
from __future__ import annotations

import asyncio
import errno
import secrets
import webbrowser
from typing import Awaitable, Callable

from aiohttp import web

from orchestrator.errors import UsageError
from orchestrator.state.db import Store
from orchestrator.ui import routes
from orchestrator.ui.routes import STORE_KEY, TOKEN_HEADER, TOKEN_KEY

HOST = "127.0.0.1"
DEFAULT_PORT = 8470
REFUSED = "401: this dlrun ui page needs the token of the URL `dlrun ui` printed\n"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _token_of(request: web.Request, *, header_only: bool) -> str:
    sent = request.headers.get(TOKEN_HEADER, "")
    if not sent and not header_only:
        sent = request.query.get("token", "")
    return sent


def _own_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    return origin is None or origin == f"http://{request.host}"


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = request.app[TOKEN_KEY]
    post = request.method not in ("GET", "HEAD")
    if not secrets.compare_digest(_token_of(request, header_only=post).encode(), token.encode()):
        return web.Response(status=401, text=REFUSED, content_type="text/plain")
    if post and not _own_origin(request):
        return web.Response(status=403, text="403: not from this page's origin\n", content_type="text/plain")
    response = await handler(request)
    response.headers["Referrer-Policy"] = "no-referrer"  # the token in the URL goes to no other site
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = ("default-src 'self'; script-src 'self'; style-src 'self'; "
                                                   "img-src 'self' data:; frame-ancestors 'none'")
    response.headers["Cache-Control"] = "no-store"
    return response


def make_app(store: Store, token: str) -> web.Application:
    app = web.Application(middlewares=[guard])
    app[TOKEN_KEY] = token
    app[STORE_KEY] = store
    routes.add_routes(app)
    return app


def new_token() -> str:
    return secrets.token_hex(32)


def url_of(port: int, token: str) -> str:
    return f"http://{HOST}:{port}/?token={token}"


async def start(app: web.Application, port: int) -> tuple[web.AppRunner, int]:
    """The app listening on 127.0.0.1:port (0: a free one); the runner and the port it got."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port, reuse_address=False)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])


def serve(store: Store, port: int | None, *, open_browser: bool, say: Callable[[str], None]) -> None:
    """Serve until Ctrl-C. port None: DEFAULT_PORT, or a free one when it is taken. A port given and taken
    (or not allowed) is a UsageError: one line, exit 2."""
    token = new_token()

    async def main() -> None:
        app = make_app(store, token)
        try:
            runner, got = await start(app, DEFAULT_PORT if port is None else port)
        except OSError as e:
            if port is not None:
                raise UsageError(_bind_error(port, e)) from None
            runner, got = await start(app, 0)
        url = url_of(got, token)
        say(f"dlrun ui: {url}  (127.0.0.1 only; Ctrl-C stops it)")
        if open_browser:
            webbrowser.open(url)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        say("dlrun ui: stopped")


def _bind_error(port: int, e: OSError) -> str:
    if e.errno == errno.EADDRINUSE:
        return f"--port {port}: 127.0.0.1:{port} is in use; choose another port or leave --port out"
    if e.errno == errno.EACCES:
        return f"--port {port}: not allowed to listen on 127.0.0.1:{port}; choose a port above 1023"
    return f"--port {port}: cannot listen on 127.0.0.1:{port} ({e.strerror or e})"
