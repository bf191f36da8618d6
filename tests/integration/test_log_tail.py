"""Following a job's log (orchestrator/runs/log_tail.py): the websocket client against a real websocket
server (aiohttp, which Ray's job head uses), and LogTail's bookkeeping: each character once, a dropped
stream reopened without repeats, whole reads only as a fallback or for the end of a short log."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from orchestrator.runs.log_tail import LogTail, WebSocketError, websocket_text


@pytest.fixture
def ws_server():
    """An aiohttp server: /tail sends the given messages then closes; /missing answers 404."""
    from aiohttp import web

    messages: list[str] = []

    async def tail(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        assert request.headers.get("Authorization") == "Bearer t0k"
        for m in messages:
            await ws.send_str(m)
        await ws.close()
        return ws

    async def missing(request):
        return web.Response(status=404, text="Job nope does not exist")

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get("/tail", tail)
    app.router.add_get("/missing", missing)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}", messages
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.run_until_complete(runner.cleanup())  # ends the handlers' tasks (else they are collected on a closed loop)
    loop.close()


def test_the_websocket_client_reads_every_message_until_the_server_closes(ws_server):
    url, messages = ws_server
    messages += ["line 1\n", "ü" * 70_000 + "\n", "x" * 200 + "\n"]  # a 16-bit and a 64-bit length frame
    got = list(websocket_text(f"{url}/tail", {"Authorization": "Bearer t0k"}, timeout=5))
    assert got == messages


def test_a_missing_websocket_is_an_error_with_the_heads_answer(ws_server):
    url, _ = ws_server
    with pytest.raises(WebSocketError, match="404.*Job nope does not exist"):
        list(websocket_text(f"{url}/missing", {}, timeout=5))


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cond()


def test_each_character_is_handed_over_once_and_the_end_is_seen():
    tail = LogTail(lambda stop: iter(["a\nb", "\nc\n"]), whole=lambda: pytest.fail("not read whole"))
    wait_for(lambda: tail.ended)
    assert tail.read() == "a\nb\nc\n" and tail.read() == ""
    assert tail.finish() == "" and tail.whole_reads == 0


def test_a_dropped_stream_is_reopened_without_repeating_what_arrived():
    opened = []

    def stream(stop):
        opened.append(1)
        if len(opened) == 1:
            yield "one\ntw"
            raise ConnectionResetError("tunnel dropped")
        yield "one\ntwo\nthree\n"  # a new stream starts at the log's beginning

    tail = LogTail(stream, whole=lambda: pytest.fail("not read whole"))
    tail.RECONNECT_S = (0.01,)
    wait_for(lambda: tail.ended)
    assert tail.read() == "one\ntwo\nthree\n" and len(opened) == 2


def test_a_head_without_websocket_is_read_whole_at_growing_intervals():
    log = ["first\n"]

    def stream(stop):
        raise WebSocketError("no websocket at /tail: HTTP/1.1 404")

    tail = LogTail(stream, whole=lambda: "".join(log), start=False)
    tail.RECONNECT_S, tail.FALLBACK_POLL_S = (0.0,), (0.01, 0.02)
    tail._thread.start()
    wait_for(lambda: tail.whole_reads >= 1)
    log.append("second\n")
    wait_for(lambda: tail._received == len("first\nsecond\n"))
    assert tail.read() == "first\nsecond\n"
    tail.close()


def test_the_end_of_a_short_log_is_read_at_once_and_of_a_long_one_from_the_stream():
    release = threading.Event()

    def stream(text):
        def gen(stop):
            yield text
            release.wait(5)  # the head closes the stream a while after the job ended
            yield "last\n"
        return gen

    short = LogTail(stream("x\n"), whole=lambda: "x\nlast\n")
    wait_for(lambda: short._received == 2)
    t0 = time.monotonic()
    assert short.read() + short.finish() == "x\nlast\n"
    assert short.whole_reads == 1 and time.monotonic() - t0 < 1.0  # no waiting for the stream

    long_text = "y" * 100 + "\n"
    long = LogTail(stream(long_text), whole=lambda: pytest.fail("a long log is not read whole again"))
    wait_for(lambda: long._received == len(long_text))
    threading.Timer(0.2, release.set).start()
    assert long.read() + long.finish(whole_max=10) == long_text + "last\n" and long.whole_reads == 0
