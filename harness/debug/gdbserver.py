"""The GDB stub: gdb-multiarch connects to `harness debug --gdb PORT` or
`harness run --gdb PORT` and drives the machine.

Three layers, as in Qiling's stub but with one method per packet: rsp.py frames the
bytes, `GdbServer.dispatch` looks the packet's first character up in a table of handler
methods (an unknown packet gets the empty reply, which gdb reads as "not supported"),
and target.py runs the machine. Registers come from the data in gdbregs.py.

    ?  stop reason          g G  all registers      p P  one register
    m M X  memory           c s (vCont)  resume      Z0 z0 (Z1)  breakpoints
    Z2 z2  write watchpoints                        k  kill    D  detach
    qSupported qXfer:features:read qAttached qC qfThreadInfo qSymbol qRcmd (monitor)
    QStartNoAckMode  vMustReplyEmpty  H T  qThreadExtraInfo

gdb sees every hart as a thread (thread id = hart + 1; `info threads`, `thread N`): Hg and
vCont;s:N select the hart whose registers are read and which steps (a step runs only that
hart), vCont;c:N with no action for the others runs hart N alone (gdb steps a thread over
a breakpoint so), a stop reply names the hart that stopped. gdb steps RISC-V in software
(a breakpoint at the next instruction, then vCont;c), so a resume makes the selected hart
leave wfi (harness/debug/target.py). Memory is read through the selected
hart's satp (with the kernel's as a fallback), so kernel and current-process addresses
both work; breakpoints set by gdb fire at their address in any address space. `monitor CMD` runs a
`harness debug` command (monitor info proc, monitor bt, monitor info mem).
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable

from harness.debug import DebugError
from harness.debug.breakpoints import Breakpoint, Watchpoint
from harness.debug.gdbregs import BY_NUMBER, G_PACKET, GdbReg, target_xml
from harness.debug.rsp import INTERRUPT, RspConnection, RspError
from harness.debug.target import Stop, Target
from harness.guest.programs import Location
from harness.machine.board import Machine
from harness.machine.config import Exit, RunResult

SIGINT, SIGTRAP, SIGABRT, SIGSEGV, SIGALRM = 2, 5, 6, 11, 14
E_FAULT, E_INVAL = b"E0e", b"E16"
FEATURES = (b"PacketSize=4000;qXfer:features:read+;QStartNoAckMode+;swbreak+;hwbreak+;"
            b"vContSupported+")
REVERSE = b";ReverseStep+;ReverseContinue+"  # with time travel (harness/debug/reverse.py)


def _hex(data: bytes) -> bytes:
    return data.hex().encode()


class GdbServer:
    """Serves one gdb connection for one target."""

    def __init__(self, target: Target, conn: RspConnection,
                 monitor: Callable[[str], str] | None = None) -> None:
        self.t = target
        self.conn = conn
        self.monitor = monitor
        self.points: dict[tuple[int, int], Breakpoint | Watchpoint] = {}
        self.last: Stop | None = None
        self.done = False      # k or D: stop serving
        self.killed = False
        self.handlers: dict[str, Callable[[bytes], bytes | None]] = {
            "?": self.h_stop_reason, "g": self.h_read_registers, "G": self.h_write_registers,
            "p": self.h_read_register, "P": self.h_write_register, "m": self.h_read_memory,
            "M": self.h_write_memory, "X": self.h_write_binary, "c": self.h_continue,
            "s": self.h_step, "C": self.h_continue, "S": self.h_step, "v": self.h_v,
            "q": self.h_query, "Q": self.h_set, "H": self.h_thread, "T": self.h_alive,
            "Z": self.h_insert, "z": self.h_remove, "k": self.h_kill, "D": self.h_detach,
            "b": self.h_reverse,
        }

    # ---------------------------------------------------------------- loop
    def serve(self) -> None:
        """Answer packets until gdb detaches, kills or disconnects."""
        while not self.done:
            pkt = self.conn.read_packet()
            if pkt is None:
                break
            if pkt == INTERRUPT:
                continue  # the target is stopped already
            reply = self.dispatch(pkt)
            if reply is not None:
                self.conn.send(reply)

    def dispatch(self, pkt: bytes) -> bytes | None:
        """The reply to one packet (None: no reply, after k)."""
        handler = self.handlers.get(chr(pkt[0])) if pkt else None
        if handler is None:
            return b""
        try:
            return handler(pkt)
        except DebugError:
            return E_FAULT
        except (ValueError, IndexError):
            return E_INVAL

    # ---------------------------------------------------------------- registers
    def _get(self, r: GdbReg) -> int:
        h = self.t.hart
        if r.kind == "csr":
            return h.csr(r.uc_reg)
        if r.kind == "priv":
            return h.priv
        return h.get(r.uc_reg)

    def _put(self, r: GdbReg, v: int) -> None:
        h = self.t.hart
        if r.kind == "csr":
            h.set_csr(r.uc_reg, v)
        elif r.kind == "priv":
            if v not in (0, 1, 3):
                raise ValueError("priv must be 0, 1 or 3")
            h.set(r.uc_reg, v)
        elif r.kind == "x" and r.regnum == 0:
            return
        else:
            h.set(r.uc_reg, v)

    def h_read_registers(self, pkt: bytes) -> bytes:
        return b"".join(_hex(self._get(r).to_bytes(8, "little")) for r in G_PACKET)

    def h_write_registers(self, pkt: bytes) -> bytes:
        data = bytes.fromhex(pkt[1:].decode())
        for i, r in enumerate(G_PACKET):
            if 8 * (i + 1) <= len(data):
                self._put(r, int.from_bytes(data[8 * i : 8 * i + 8], "little"))
        return b"OK"

    def h_read_register(self, pkt: bytes) -> bytes:
        r = BY_NUMBER.get(int(pkt[1:], 16))
        if r is None:
            return b"E45"  # gdb then marks the register unavailable
        return _hex(self._get(r).to_bytes(8, "little"))

    def h_write_register(self, pkt: bytes) -> bytes:
        num, value = pkt[1:].split(b"=")
        r = BY_NUMBER.get(int(num, 16))
        if r is None:
            return b"E45"
        self._put(r, int.from_bytes(bytes.fromhex(value.decode()), "little"))
        return b"OK"

    # ---------------------------------------------------------------- memory
    def h_read_memory(self, pkt: bytes) -> bytes:
        addr, length = (int(x, 16) for x in pkt[1:].split(b","))
        return _hex(self.t.read(addr, min(length, 0x4000)))

    def h_write_memory(self, pkt: bytes) -> bytes:
        head, data = pkt[1:].split(b":", 1)
        addr, _ = (int(x, 16) for x in head.split(b","))
        self.t.write(addr, bytes.fromhex(data.decode()))
        return b"OK"

    def h_write_binary(self, pkt: bytes) -> bytes:
        head, data = pkt[1:].split(b":", 1)
        addr, length = (int(x, 16) for x in head.split(b","))
        if length:
            self.t.write(addr, data[:length])
        return b"OK"

    # ---------------------------------------------------------------- breakpoints
    def h_insert(self, pkt: bytes) -> bytes:
        kind, addr_s, size_s = pkt[1:].split(b",")[:3]
        addr, size = int(addr_s, 16), int(size_s.split(b";")[0], 16)
        key = (int(kind), addr)
        if key in self.points:
            return b"OK"
        if kind in (b"0", b"1"):
            self.points[key] = self.t.bps.add([Location(None, addr)], f"*{addr:#x}",
                                              internal=True)
        elif kind == b"2":
            self.points[key] = self.t.bps.add_watch(addr, size, f"*{addr:#x}", None,
                                                    self.t.physical(addr))
        else:
            return b""  # read/access watchpoints: not supported
        return b"OK"

    def h_remove(self, pkt: bytes) -> bytes:
        kind, addr_s = pkt[1:].split(b",")[:2]
        p = self.points.pop((int(kind), int(addr_s, 16)), None)
        if p is not None:
            self.t.bps.remove(p)
        return b"OK"

    # ---------------------------------------------------------------- running
    def _run(self, step: bool, only: int | None = None) -> bytes:
        if not self.t.alive and self.t.m.travel is not None:  # at the end of history
            return f"T{SIGTRAP:02x}replaylog:end;".encode() + self._thread()
        if not self.t.alive:
            return self._end_reply(self.t.m.result)  # type: ignore[arg-type]
        with self.conn.watch_interrupt(lambda: self.t.m.request_pause("gdb interrupt")):
            stop = self.t.stepi() if step else self.t.resume(only)
        self.last = stop
        return self.stop_reply(stop)

    def h_reverse(self, pkt: bytes) -> bytes:
        """bs / bc: reverse-stepi of the selected thread, reverse-continue (any thread
        stops at the last breakpoint or watchpoint hit before now)."""
        from harness.debug import reverse

        if self.t.m.travel is None or pkt not in (b"bs", b"bc"):
            return b""
        with self.conn.watch_interrupt(lambda: self.t.m.request_pause("gdb interrupt")):
            stop = (reverse.reverse_stepi(self.t) if pkt == b"bs"
                    else reverse.reverse_continue(self.t))
        self.last = stop
        return self.stop_reply(stop)

    def stop_reply(self, stop: Stop) -> bytes:
        if stop.kind == "history":  # the start of the recorded past
            return f"T{SIGTRAP:02x}replaylog:begin;".encode() + self._thread()
        if stop.result is not None and self.t.m.travel is not None \
                and stop.result.exit == Exit.POWEROFF:  # the end: the past stays open
            return f"T{SIGTRAP:02x}replaylog:end;".encode() + self._thread()
        if stop.result is not None:
            return self._stop_at_end(stop.result)
        if stop.kind == "watchpoint" and stop.hit is not None:
            wp = stop.point
            va = (wp.addr + max(stop.hit.store_addr - wp.pa, 0)
                  if isinstance(wp, Watchpoint) else stop.hit.store_addr)
            return f"T{SIGTRAP:02x}watch:{va:x};".encode() + self._thread()
        if stop.kind == "breakpoint":
            return f"T{SIGTRAP:02x}swbreak:;".encode() + self._thread()
        if stop.kind == "interrupted":
            return f"T{SIGINT:02x}".encode() + self._thread()
        return f"T{SIGTRAP:02x}".encode() + self._thread()

    def _stop_at_end(self, r: RunResult) -> bytes:
        """A panic or fault stops the hart where it is (inspectable); power-off exits."""
        if r.exit == Exit.PANIC:
            return f"T{SIGABRT:02x}".encode() + self._thread()
        if r.exit == Exit.FAULT:
            return f"T{SIGSEGV:02x}".encode() + self._thread()
        return self._end_reply(r)

    def _end_reply(self, r: RunResult) -> bytes:
        if r.exit == Exit.POWEROFF:
            return f"W{r.status & 0xFF:02x}".encode()
        sig = {Exit.PANIC: SIGABRT, Exit.FAULT: SIGSEGV, Exit.TIMEOUT: SIGALRM}.get(r.exit, 9)
        return f"X{sig:02x}".encode()

    def _thread(self) -> bytes:
        return f"thread:{self.t.m.cur + 1:x};".encode()

    def _hart_of(self, tid: bytes) -> int | None:
        """The hart of a thread id (hex; 0 or -1: any, None)."""
        n = int(tid, 16) if tid and tid != b"-1" else 0
        if n <= 0:
            return None
        if n > len(self.t.m.cpus):
            raise ValueError(f"no thread {n}")
        return n - 1

    def h_thread(self, pkt: bytes) -> bytes:
        """Hg/Hc THREAD: the hart later packets are about."""
        h = self._hart_of(pkt[2:])
        if h is not None:
            self.t.select_hart(h)
        return b"OK"

    def h_alive(self, pkt: bytes) -> bytes:
        return b"OK" if self._hart_of(pkt[1:]) is not None else b"E01"

    def h_continue(self, pkt: bytes) -> bytes:
        self._resume_at(pkt, 1 if pkt[:1] == b"c" else pkt.find(b";") + 1)
        return self._run(step=False)

    def h_step(self, pkt: bytes) -> bytes:
        self._resume_at(pkt, 1 if pkt[:1] == b"s" else pkt.find(b";") + 1)
        return self._run(step=True)

    def _resume_at(self, pkt: bytes, start: int) -> None:
        """c ADDR / s ADDR resume elsewhere (the signal of C/S is ignored)."""
        if start > 0 and len(pkt) > start:
            from harness.cpu.registers import REG_PC

            self.t.hart.set(REG_PC, int(pkt[start:], 16))

    def h_stop_reason(self, pkt: bytes) -> bytes:
        if self.last is None:
            return f"T{SIGTRAP:02x}".encode() + self._thread()
        return self.stop_reply(self.last)

    def h_kill(self, pkt: bytes) -> bytes | None:
        self.done = self.killed = True
        if self.t.alive:
            self.t.m._finish(RunResult(Exit.QUIT, pc=self.t.pc, message="killed by gdb"))
        return None

    def h_detach(self, pkt: bytes) -> bytes:
        for p in list(self.points.values()):
            self.t.bps.remove(p)
        self.points.clear()
        self.done = True
        return b"OK"

    # ---------------------------------------------------------------- v, q, Q
    def h_v(self, pkt: bytes) -> bytes | None:
        if pkt == b"vCont?":
            return b"vCont;c;C;s;S"
        if pkt.startswith(b"vCont;"):
            # actions ACTION[:TID] in order; a thread without one stays stopped
            acts = [a.partition(b":")[::2] for a in pkt[6:].split(b";")]
            action, tid = acts[0]
            if action[:1] in (b"s", b"S"):
                h = self._hart_of(tid)
                if h is not None:
                    self.t.select_hart(h)
                return self._run(step=True)
            if action[:1] in (b"c", b"C"):
                alone = all(t for _, t in acts)  # no default action: only these run
                return self._run(step=False, only=self._hart_of(tid) if alone else None)
            return b""
        if pkt.startswith(b"vKill"):
            self.h_kill(pkt)
            return b"OK"
        return b""  # vMustReplyEmpty and everything else

    def h_query(self, pkt: bytes) -> bytes:
        if pkt.startswith(b"qSupported"):
            return FEATURES + (REVERSE if self.t.m.travel is not None else b"")
        if pkt.startswith(b"qXfer:features:read:"):
            annex, _, rng = pkt[len(b"qXfer:features:read:"):].partition(b":")
            if annex != b"target.xml":
                return b"E00"
            off, length = (int(x, 16) for x in rng.split(b","))
            xml = target_xml().encode()
            chunk = xml[off : off + length]
            return (b"l" if off + length >= len(xml) else b"m") + chunk
        if pkt == b"qAttached" or pkt.startswith(b"qAttached:"):
            return b"1"
        if pkt == b"qC":
            return f"QC{self.t.m.cur + 1:x}".encode()
        if pkt == b"qfThreadInfo":
            return b"m" + b",".join(f"{c.id + 1:x}".encode() for c in self.t.m.cpus)
        if pkt.startswith(b"qThreadExtraInfo,"):
            c = self.t.m.cpus[self._hart_of(pkt.split(b",")[1]) or 0]
            state = "parked" if not c.started else "wfi" if c.idle else "running"
            return _hex(f"hart {c.id} ({state})".encode())
        if pkt == b"qsThreadInfo":
            return b"l"
        if pkt.startswith(b"qSymbol"):
            return b"OK"
        if pkt.startswith(b"qRcmd,"):
            return self._monitor(bytes.fromhex(pkt[6:].decode()).decode(errors="replace"))
        return b""

    def _monitor(self, command: str) -> bytes:
        if self.monitor is None:
            return b""
        try:
            text = self.monitor(command)
        except DebugError as e:
            text = str(e)
        if text:
            self.conn.send(b"O" + _hex((text.rstrip("\n") + "\n").encode()))
        return b"OK"

    def h_set(self, pkt: bytes) -> bytes:
        if pkt == b"QStartNoAckMode":
            self.conn.send(b"OK")  # acknowledged in the old mode, then no more acks
            self.conn.ack = False
            return None  # type: ignore[return-value]
        return b""

    def h_ok(self, pkt: bytes) -> bytes:
        return b"OK"


def serve(target: Target, port: int, announce: Callable[[int], None],
          monitor: Callable[[str], str] | None = None,
          log: Callable[[str], None] | None = None) -> RunResult:
    """Listen on 127.0.0.1:port (0: any free port, given to announce), serve one gdb
    session, then run the machine to its end unless gdb killed it."""
    with socket.create_server(("127.0.0.1", port)) as srv:
        announce(srv.getsockname()[1])
        sock, _ = srv.accept()
    server = GdbServer(target, RspConnection(sock, log), monitor)
    try:
        server.serve()
    except (RspError, OSError) as e:
        print(f"[harness] gdb connection lost: {e}", file=sys.stderr)
    finally:
        sock.close()
        for p in list(server.points.values()):
            target.bps.remove(p)
    if target.m.result is not None:
        return target.m.result
    while True:  # detached (or gdb went away): the guest runs on to its end
        r = target.m.run()
        if r.exit != Exit.PAUSE:
            return r


def serve_machine(machine: Machine, port: int) -> RunResult:
    """`harness run --gdb PORT`: serve a freshly built machine (user programs' symbols
    from the build directory next to the kernel's) with `harness debug`'s commands as
    gdb's `monitor` commands."""
    from harness.debug.commands import Interpreter
    from harness.guest.programs import Programs

    kernel = machine.config.kernel
    target = Target(machine, Programs(kernel, kernel.resolve().parent.parent / "user"))

    def announce(actual: int) -> None:
        print(f"[harness] GDB stub listening on 127.0.0.1:{actual}; connect with:\r\n"
              f"  gdb-multiarch {kernel} -ex 'target remote :{actual}'\r",
              file=sys.stderr, flush=True)

    return serve(target, port, announce, monitor=Interpreter(target).execute)
