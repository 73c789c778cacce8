"""GDB remote serial protocol framing: the transport layer of the GDB stub.

A packet is `$payload#cc` (cc = modulo-256 sum of the payload bytes, two hex digits).
`}` escapes `$ # } *` in binary data (the byte XOR 0x20); a run-length form
(`X*n`) may appear in what gdb sends and is expanded. Each packet is acknowledged with
`+` (or `-`: send it again) until gdb asks for QStartNoAckMode. A lone 0x03 byte is an
interrupt request (Ctrl-C in gdb): while the target runs, `watch_interrupt` reads the
socket on a helper thread so it can be noticed.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

INTERRUPT = b"\x03"
MAX_RESENDS = 5


class RspError(Exception):
    """The peer broke the protocol (bad checksums forever, a closed connection mid-packet)."""


def checksum(payload: bytes) -> bytes:
    return f"{sum(payload) & 0xFF:02x}".encode()


def escape(data: bytes) -> bytes:
    out = bytearray()
    for b in data:
        if b in b"$#}*":
            out += bytes((0x7D, b ^ 0x20))
        else:
            out.append(b)
    return bytes(out)


def unescape(data: bytes) -> bytes:
    """Undo `}` escapes and expand run-length encoding."""
    out = bytearray()
    i = 0
    while i < len(data):
        b = data[i]
        if b == 0x7D and i + 1 < len(data):
            out.append(data[i + 1] ^ 0x20)
            i += 2
        elif b == 0x2A and out and i + 1 < len(data):  # '*': repeat the previous byte
            out += bytes((out[-1],)) * (data[i + 1] - 29)
            i += 2
        else:
            out.append(b)
            i += 1
    return bytes(out)


def frame(payload: bytes) -> bytes:
    return b"$" + payload + b"#" + checksum(payload)


class RspConnection:
    """One gdb connection over a socket."""

    def __init__(self, sock: socket.socket, log: Callable[[str], None] | None = None) -> None:
        self.sock = sock
        self.ack = True
        self.log = log
        self._buf = bytearray()
        self._lock = threading.Lock()

    def _byte(self) -> int | None:
        with self._lock:
            if self._buf:
                return self._buf.pop(0)
        data = self.sock.recv(4096)
        if not data:
            return None
        with self._lock:
            self._buf += data[1:]
        return data[0]

    def read_packet(self) -> bytes | None:
        """The next packet's payload (unescaped), INTERRUPT for a 0x03 byte, None when
        the peer closed the connection."""
        while True:
            b = self._byte()
            if b is None:
                return None
            if b == 0x03:
                return INTERRUPT
            if b != 0x24:  # '$'; acks and noise between packets are skipped
                continue
            body = bytearray()
            while (b := self._byte()) is not None and b != 0x23:  # '#'
                body.append(b)
            c1, c2 = self._byte(), self._byte()
            if b is None or c1 is None or c2 is None:
                return None
            if bytes((c1, c2)).lower() != checksum(bytes(body)):
                if self.ack:
                    self.sock.sendall(b"-")
                continue
            if self.ack:
                self.sock.sendall(b"+")
            payload = unescape(bytes(body))
            if self.log:
                self.log(f"<- {payload[:200]!r}")
            return payload

    def send(self, payload: bytes) -> None:
        """Send one packet (escaped); in ack mode, resend until gdb acknowledges it."""
        if self.log:
            self.log(f"-> {payload[:200]!r}")
        data = frame(escape(payload))
        for _ in range(MAX_RESENDS):
            self.sock.sendall(data)
            if not self.ack:
                return
            while True:
                b = self._byte()
                if b is None:
                    raise RspError("gdb closed the connection")
                if b == 0x2B:  # '+'
                    return
                if b == 0x2D:  # '-': send it again
                    break
                if b == 0x03:
                    with self._lock:
                        self._buf.insert(0, b)
                    return
        raise RspError("gdb rejected a packet 5 times (bad checksums)")

    @contextmanager
    def watch_interrupt(self, on_interrupt: Callable[[], None]) -> Iterator[None]:
        """While the body runs (the target is running), call on_interrupt when gdb sends
        0x03; other bytes are kept for read_packet."""
        rd, wr = os.pipe()
        with self._lock:
            if INTERRUPT in self._buf:  # it came in with the packet that started us
                self._buf.remove(0x03)
                on_interrupt()

        def watch() -> None:
            while True:
                ready, _, _ = select.select([self.sock, rd], [], [])
                if rd in ready:
                    return
                data = self.sock.recv(4096)
                if not data:
                    on_interrupt()  # gdb went away: stop the target so the stub notices
                    return
                if INTERRUPT in data:
                    on_interrupt()
                    data = data.replace(INTERRUPT, b"", 1)
                with self._lock:
                    self._buf += data

        t = threading.Thread(target=watch, name="gdb-interrupt", daemon=True)
        t.start()
        try:
            yield
        finally:
            os.write(wr, b"x")
            t.join()
            os.close(rd)
            os.close(wr)
