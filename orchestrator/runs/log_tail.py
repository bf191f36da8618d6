"""A job's log as it grows, read once: Ray's websocket tail (GET /api/jobs/{id}/logs/tail) in a thread.

The head sends the log from its start, then each new chunk, and closes the stream a second or two
after the job ended. LogTail buffers what arrived; read() hands over what is new (each character
once, so following a log costs time linear in its length). A dropped stream is reopened and the
part already received skipped; a head whose websocket cannot be reached at all is read whole at
longer and longer intervals instead. finish() is called once the job is terminal: it hands over
the rest: a short log (up to 1 MiB) is read whole once more at once, since the stream closes only a
second or two after the job ended; a longer one is never read again: its stream's end is awaited.
"""
from __future__ import annotations

import base64
import os
import socket
import ssl
import struct
import threading
import time
from typing import Callable, Iterator
from urllib.parse import SplitResult, urlsplit


WHOLE_READ_MAX = 1 << 20  # characters: a log up to this long is read whole at the end rather than waited for
END_WAIT_S = 5.0  # how long the end of a longer log is waited for (the head closes the stream 1-3 s after)


class WebSocketError(OSError):
    pass


def _recv_exact(sock, n: int, stop: threading.Event | None) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except socket.timeout:
            if stop is not None and stop.is_set():
                raise WebSocketError("closed by dlrun") from None
            continue
        if not chunk:
            raise WebSocketError("connection closed by the head")
        buf += chunk
    return bytes(buf)


def _recv_some(sock) -> bytes:
    """Whatever else is already there (without waiting), so that frames are parsed from big reads."""
    try:
        sock.setblocking(False)
        return sock.recv(1 << 16)
    except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
        return b""
    finally:
        sock.settimeout(0.5)


def _send_frame(sock, opcode: int, payload: bytes = b"") -> None:
    """A client frame: FIN, opcode, masked payload (RFC 6455 5.3: a client masks every frame)."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n)
    sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def websocket_text(url: str, headers: dict[str, str], *, timeout: float = 30.0,
                   stop: threading.Event | None = None) -> Iterator[str]:
    """The text messages of a websocket at http(s)://host:port/path until the server closes it."""
    u = urlsplit(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    sock = socket.create_connection((u.hostname, port), timeout=timeout)
    try:
        if u.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=u.hostname)
        rest = _handshake(sock, u, port, headers)
        sock.settimeout(0.5)  # so that a stop request is noticed
        frames = _Frames(sock, rest, stop)
        message = bytearray()
        while True:
            opcode, final, payload = frames.next()
            if opcode == 0x8:  # close: answer it, and the stream is over
                try:
                    _send_frame(sock, 0x8, payload[:2])
                except OSError:
                    pass
                return
            if opcode == 0x9:
                _send_frame(sock, 0xA, payload)
            elif opcode in (0x0, 0x1, 0x2):
                message += payload
                if final:
                    yield message.decode("utf-8", errors="replace")
                    message = bytearray()
    finally:
        sock.close()


def _handshake(sock, u: SplitResult, port: int, headers: dict[str, str]) -> bytes:
    """The HTTP upgrade; returns what the server sent after its answer (the first frames' bytes)."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {u.path or '/'}{'?' + u.query if u.query else ''} HTTP/1.1", f"Host: {u.hostname}:{port}",
             "Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
             "Sec-WebSocket-Version: 13", *(f"{k}: {v}" for k, v in headers.items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    response = b""
    while b"\r\n\r\n" not in response:
        chunk = sock.recv(4096)
        if not chunk:
            raise WebSocketError("the head closed the connection during the websocket handshake")
        response += chunk
    head, _, rest = response.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    if " 101 " not in status + " ":
        raise WebSocketError(f"no websocket at {u.path}: {status} {rest[:200].decode(errors='replace')}")
    return rest


class _Frames:
    """The frames of a websocket: received bytes and how far they were parsed (no copy per frame)."""

    def __init__(self, sock, rest: bytes, stop: threading.Event | None):
        self.sock, self.stop = sock, stop
        self.buf, self.pos = bytearray(rest), 0

    def take(self, n: int) -> bytes:
        if len(self.buf) - self.pos < n:
            del self.buf[:self.pos]
            self.pos = 0
            while len(self.buf) < n:
                self.buf += _recv_exact(self.sock, 1, self.stop) + _recv_some(self.sock)
        out = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return out

    def next(self) -> tuple[int, bool, bytes]:
        """(opcode, whether it ends its message, the unmasked payload)."""
        b0, b1 = self.take(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self.take(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self.take(8))[0]
        mask = self.take(4) if b1 & 0x80 else None
        payload = self.take(n)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return b0 & 0x0F, bool(b0 & 0x80), payload


class LogTail:
    """`stream(stop)`: a fresh iterator over the log's text from its start (the websocket), which ends
    soon after the event `stop` is set; `whole()`: the log read at once (the fallback, and the end)."""

    RECONNECT_S = (0.5, 1.0, 2.0, 5.0)
    FALLBACK_AFTER = 3  # failed connections in a row before reading the whole log instead
    FALLBACK_POLL_S = (5.0, 60.0)  # first and longest interval of whole reads

    def __init__(self, stream: Callable[[threading.Event], Iterator[str]], whole: Callable[[], str], *,
                 start: bool = True):
        self._stream, self._whole = stream, whole
        self._lock = threading.Lock()
        self._buf: list[str] = []
        self._received = 0  # characters of the log received so far (handed over or buffered)
        self._stop = threading.Event()
        self._new = threading.Event()
        self._closed = False  # finish() took over: nothing more is accepted from the stream
        self.ended = False  # the head closed the stream: the job ended and all of its log arrived
        self.error: str | None = None  # the last reason the stream broke
        self.whole_reads = 0  # times the log was read whole (the fallback, or the end of a short log)
        self._thread = threading.Thread(target=self._run, name="dlrun-log-tail", daemon=True)
        if start:
            self._thread.start()

    def _accept(self, text: str, skip: int) -> int:
        """Take `text`, of which the first `skip` characters were received already; return what to skip next."""
        if skip >= len(text):
            return skip - len(text)
        with self._lock:
            if self._closed:
                return 0
            fresh = text[skip:]
            self._buf.append(fresh)
            self._received += len(fresh)
        self._new.set()
        return 0

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            skip = self._received  # a reopened stream starts at the log's beginning again
            got = False
            try:
                for text in self._stream(self._stop):
                    got = True
                    skip = self._accept(text, skip)
                    if self._stop.is_set():
                        return
                with self._lock:
                    self.ended = not self._closed
                self._new.set()
                return
            except Exception as e:
                self.error = str(e)[:200]
            failures = 0 if got else failures + 1
            if failures >= self.FALLBACK_AFTER:
                return self._poll_whole()
            self._stop.wait(self.RECONNECT_S[min(failures, len(self.RECONNECT_S) - 1)])

    def _poll_whole(self) -> None:
        interval, longest = self.FALLBACK_POLL_S
        while not self._stop.wait(interval):
            try:
                self._accept(self._whole(), self._received)
                self.whole_reads += 1
            except Exception as e:
                self.error = str(e)[:200]
            interval = min(longest, interval * 2)

    def read(self) -> str:
        """What arrived since the last read (possibly ending inside a line)."""
        self._new.clear()
        with self._lock:
            out, self._buf = "".join(self._buf), []
        return out

    def wait(self, timeout: float) -> bool:
        """Block until something new arrived or the stream ended, at most `timeout` seconds."""
        return self._new.wait(timeout)

    def finish(self, whole_max: int = WHOLE_READ_MAX, wait_s: float = END_WAIT_S) -> str:
        """The job is terminal: the rest of its log. Stops following.

        Up to `whole_max` characters received, the log is read whole at once (cheaper than waiting the
        second or two the head takes to close the stream); a longer log is not read again: the stream
        delivers its end and closes (within `wait_s`, else the whole read after all)."""
        if not self.ended and self._received > whole_max and self._thread.is_alive():
            deadline = time.monotonic() + wait_s
            while not self.ended and self._thread.is_alive() and time.monotonic() < deadline:
                self._new.wait(min(0.1, max(0.0, deadline - time.monotonic())))
                self._new.clear()
        self._stop.set()
        with self._lock:
            self._closed = True  # from here on the stream's thread adds nothing: _received is final
            ended = self.ended
        if not ended:
            try:
                whole = self._whole()
                self.whole_reads += 1
            except Exception:
                whole = ""
            with self._lock:
                rest = whole[self._received:]
                self._buf.append(rest)
                self._received += len(rest)
        return self.read()

    def close(self) -> None:
        self._stop.set()
