"""Frames, source and the info commands: backtrace, frame, up, down, list, info
registers/proc/mem/locals/args/frame/line/symbol/programs/source."""

from __future__ import annotations

import re

from harness.cpu.registers import ABI_NAMES, PRIV_NAMES, REG_PC
from harness.debug import DebugError
from harness.debug.cmdbase import (
    INFO_SUBCOMMANDS,
    LIST_LINES,
    SIE_BITS,
    SIP_BITS,
    SSTATUS_BITS,
    CommandBase,
    ListPos,
)
from harness.debug.expr import CSR_REGS, REGISTERS
from harness.debug.values import format_value
from harness.guest.backtrace import process_backtrace
from harness.guest.memory import flags_text, satp_root
from harness.guest.programs import Program
from harness.machine.traps import cause_name


class InfoCommands(CommandBase):
    """backtrace, frame, up, down, list, info ...."""

    # ---------------------------------------------------------------- frames
    def cmd_backtrace(self, arg: str) -> str:
        """backtrace [N] | backtrace pid PID: frames from the PC outwards, across a trap
        from user space into the user program's own frames; with pid, where a process
        that is not running stopped (from the registers swtch saved)."""
        m = re.fullmatch(r"pid\s+(\S+)", arg)
        if m:
            procs = self.t.procs
            p = procs.by_pid(self.evaluator().integer(m.group(1))) if procs else None
            if p is None:
                raise DebugError(f"No process with pid {m.group(1)}.")
            if procs is not None and p.addr == procs.current_addr():
                frames = self.frames()
            else:
                frames = process_backtrace(self.t, p)
            n = len(frames)
        else:
            frames = self.frames()
            n = self._count(arg) if arg else len(frames)
        out = []
        for f in frames[:n]:
            if f.entry is not None:
                out.append(f"--- trap from user space: pid {f.entry.pid} ({f.entry.name}) ---")
            out.append(self.frame_line(f, with_pc=f.level > 0 or None))
        if n < len(frames):
            out.append("(More stack frames follow...)")
        return "\n".join(out)

    def cmd_cpu(self, arg: str) -> str:
        """cpu [N]: select hart N (registers, backtrace, stepping follow it); no N: which
        hart is selected."""
        if arg:
            self.t.select_hart(self.evaluator().integer(arg))
            self._frames, self.frame_no = None, 0
        f = self.selected()
        where = f"[Switching to hart {self.t.m.cur}]" if arg else f"hart {self.t.m.cur}"
        return where + (f"\n{self.frame_line(f)}" if f is not None else "")

    def info_cpus(self, arg: str) -> str:
        m, procs = self.t.m, self.t.procs
        out = ["  HART  STATE    MODE  PC                   PROCESS"]
        for c in m.cpus:
            state = "parked" if not c.started else "wfi" if c.idle else "running"
            pc = c.hart.get(REG_PC) if c.started else c.pc
            p = procs.current(c.id) if procs is not None and c.started else None
            mark = "*" if c.id == m.cur else " "
            mode = PRIV_NAMES.get(c.hart.priv, "?") if c.started else "-"
            who = f"pid {p.pid} ({p.name})" if p else "-"
            out.append(f"{mark} {c.id:>4}  {state:<8} {mode:<5} "
                       f"{pc:#x}{self._sym_tag(None, pc):<18} {who}".rstrip())
        return "\n".join(out)

    def cmd_frame(self, arg: str) -> str:
        """frame [N]: select frame N (for list, print's context, info frame)."""
        if arg:
            n = self.evaluator().integer(arg)
            if not 0 <= n < len(self.frames()):
                raise DebugError(f"No frame at level {arg}.")
            self.frame_no = n
        f = self.selected()
        if f is None:
            raise DebugError("No stack.")
        if f.program is not None and f.pc is not None:
            row = f.program.row(f.lookup_pc or f.pc)
            if row is not None:
                self.list_pos = ListPos(f.program, row.file, max(1, row.line - 5))
        return self.frame_line(f) + ("\n" + self.location_text(f, False)
                                     if f.program and f.pc and f.program.row(f.pc) else "")

    def cmd_up(self, arg: str) -> str:
        """up [N]: select the caller's frame."""
        return self.cmd_frame(str(min(self.frame_no + self._count(arg), len(self.frames()) - 1)))

    def cmd_down(self, arg: str) -> str:
        """down [N]: select the callee's frame."""
        return self.cmd_frame(str(max(self.frame_no - self._count(arg), 0)))

    # ---------------------------------------------------------------- source
    def cmd_list(self, arg: str) -> str:
        """list [LOCATION | FILE:LINE | FIRST,LAST]: source lines (again: the next ones)."""
        if arg:
            if "," in arg:
                a, b = arg.split(",", 1)
                pos = self._list_target(a.strip())
                last = int(b.strip()) if b.strip().isdigit() else pos.line + LIST_LINES - 1
                self.list_pos = pos
                return self._list(pos, last - pos.line + 1)
            pos = self._list_target(arg)
            pos.line = max(1, pos.line - 5)
            self.list_pos = pos
        if self.list_pos is None:
            raise DebugError("No symbol table is loaded.  Use the \"list FILE:LINE\" command.")
        return self._list(self.list_pos, LIST_LINES)

    def _list_target(self, spec: str) -> ListPos:
        prog = self.context_program() or self.programs.kernel
        m = re.fullmatch(r"(?:([\w-]+):)?([^:]+\.[chSs]):(\d+)", spec)
        if m:
            p = self.programs.get(m.group(1)) if m.group(1) else None
            for cand in ([p] if p else [prog, self.programs.kernel, *self.programs.users()]):
                files = cand.lines.match_file(m.group(2)) if cand else []
                if files:
                    return ListPos(cand, files[0], int(m.group(3)))
            raise DebugError(f"No source file named {m.group(2)}.")
        if spec.isdigit():
            if self.list_pos is None:
                raise DebugError("No default source file; use FILE:LINE.")
            return ListPos(self.list_pos.program, self.list_pos.file, int(spec))
        locs = self.programs.resolve(spec, prog, None, self.evaluator().integer)
        loc = locs[0]
        p = loc.program or prog
        hit = p.function(loc.addr) if loc.line is None else None
        row = p.row(hit[0].addr if hit else loc.addr)  # a function: from its first line
        if row is None:
            raise DebugError(f"No line number information available for {spec}.")
        return ListPos(p, row.file, row.line)

    def _list(self, pos: ListPos, n: int) -> str:
        path = pos.program.lines.source_path(pos.file)
        if path is None:
            raise DebugError(f"{pos.file}: source file not found.")
        if path not in self._sources:
            self._sources[path] = path.read_text(errors="replace").splitlines()
        lines = self._sources[path]
        if pos.line > len(lines):
            raise DebugError(f'Line number {pos.line} out of range; "{pos.file}" has '
                             f"{len(lines)} lines.")
        end = min(len(lines), pos.line + n - 1)
        out = [f"{i}\t{lines[i - 1]}" for i in range(pos.line, end + 1)]
        pos.line = end + 1
        return "\n".join(out)

    # ---------------------------------------------------------------- info
    def cmd_info(self, arg: str) -> str:
        """info SUBCOMMAND: breakpoints, registers [REG...], all-registers, proc [PID],
        frame, locals, args, symbol ADDR, line [LOCATION], mem [PID], programs, source,
        cpus (every hart: state, privilege, pc, process; * = selected), locks (held
        locks by hart and process, sleepers by channel)."""
        parts = arg.split(None, 1)
        if not parts:
            return "info " + ", ".join(INFO_SUBCOMMANDS)
        word = parts[0].lower()
        sub = {"b": "breakpoints", "br": "breakpoints", "break": "breakpoints",
               "r": "registers", "reg": "registers", "wat": "watchpoints"}.get(word)
        if sub is None:
            hits = [s for s in INFO_SUBCOMMANDS if s.startswith(word)]
            if len(hits) != 1:
                raise DebugError(f'Undefined info command: "{word}".  Try "help info".')
            sub = hits[0]
        return getattr(self, "info_" + sub.replace("-", "_"))(parts[1] if len(parts) > 1 else "")

    def info_registers(self, arg: str, every: bool = False) -> str:
        h = self.t.hart
        prog = self.t.program_at()
        if arg:
            names = [a.lstrip("$") for a in arg.split()]
        else:
            names = [*ABI_NAMES, "pc", "priv", "sstatus", "sie", "sip", "stvec", "sepc",
                     "scause", "stval", "satp", "sscratch"]
            if every:
                names += ["scounteren", "mstatus", "mie", "mip", "medeleg", "mideleg", "misa"]
        out = []
        for name in names:
            if name in REGISTERS or name in CSR_REGS or name == "priv":
                v = (h.get(REGISTERS[name]) if name in REGISTERS else
                     h.priv if name == "priv" else h.csr(CSR_REGS[name]))
            else:
                raise DebugError(f"Invalid register `{name}'")
            out.append(f"{name:<14} {v:<#18x} {self._natural(name, v, prog)}".rstrip())
        return "\n".join(out)

    def info_all_registers(self, arg: str) -> str:
        return self.info_registers(arg, every=True)

    def _natural(self, name: str, v: int, prog: Program | None) -> str:
        if name == "priv":
            return {0: "U (user)", 1: "S (supervisor)", 3: "M (machine)"}.get(v, "?")
        if name == "sstatus":
            bits = " ".join(f"{n}={(v >> b) & 1}" for n, b in SSTATUS_BITS if n != "SPP")
            fs = ("off", "initial", "clean", "dirty")[(v >> 13) & 3]
            return f"{bits} SPP={'S' if v >> 8 & 1 else 'U'} FS={fs}"
        if name in ("sie", "sip"):
            bits = SIE_BITS if name == "sie" else SIP_BITS
            return " ".join(n for n, b in bits if v >> b & 1) or "-"
        if name == "scause":
            return cause_name(v) if v else "-"
        if name == "satp":
            root = satp_root(v)
            if root is None:
                return "bare (paging off)"
            return f"Sv39, root {root:#x} ({self.t.space().name if v == self.t.satp() else '?'})"
        if name in ("pc", "ra", "stvec", "sepc", "mepc", "mtvec") or name.startswith("x"):
            tag = self._sym_tag(prog, v & ~3 if name == "stvec" else v)
            return f"{v:#x}{tag}" if tag else (str(v) if name.startswith("x") else "")
        if name in ("sp", "gp", "tp", "s0", "fp"):
            return f"{v:#x}"
        if name in REGISTERS:
            tag = self._sym_tag(prog, v)
            return f"{v:#x}{tag}" if tag else str(v - (1 << 64) if v >> 63 else v)
        return ""

    def info_proc(self, arg: str) -> str:
        procs = self.t.procs
        if procs is None:
            raise DebugError("The kernel has no debug info for its process table.")
        cur = procs.current_addr()
        if arg:
            p = procs.by_pid(self.evaluator().integer(arg))
            if p is None:
                raise DebugError(f"No process with pid {arg}.")
            return self._proc_detail(p, p.addr == cur)
        out = ["  PID  PPID  STATE     KILLED  SZ        NAME              WAIT CHANNEL"]
        for p in procs.all():
            mark = "*" if p.addr == cur else " "
            chan = f"{p.chan:#x}{self._sym_tag(None, p.chan)}" if p.chan else ""
            out.append(f"{mark}{p.pid:>4}  {p.ppid:>4}  {p.state:<9} {p.killed:<7} {p.sz:<9} "
                       f"{p.name:<17} {chan}".rstrip())
        return "\n".join(out)

    def _proc_detail(self, p, on_cpu: bool) -> str:  # noqa: ANN001
        lines = [f"process {p.pid} ({p.name}), slot {p.slot} at {p.addr:#x}"
                 f"{' - on the CPU' if on_cpu else ''}",
                 f"  state {p.state}, parent {p.ppid}, killed {p.killed}, xstate {p.xstate}",
                 f"  memory {p.sz} bytes, page table {p.pagetable:#x}, trap frame {p.trapframe:#x}",
                 f"  kernel stack {p.kstack:#x}"]
        if p.chan:
            lines.append(f"  sleeping on {p.chan:#x}{self._sym_tag(None, p.chan)}")
        return "\n".join(lines)

    def info_locals(self, arg: str, args: bool = False) -> str:
        if self.frame_no != 0:
            raise DebugError("Locals are only known for frame #0 (outer frames' registers "
                             "are not saved where the debugger can find them).")
        ev = self.evaluator()
        out = []
        for loc, value in self.frame_locals():
            if loc.arg != args:
                continue
            try:
                text = format_value(ev, value) if value is not None else "<optimized out>"
            except DebugError as e:
                text = f"<{e}>"
            out.append(f"{loc.name} = {text}")
        return "\n".join(out) or ("No arguments." if args else "No locals.")

    def info_args(self, arg: str) -> str:
        return self.info_locals(arg, args=True)

    def info_frame(self, arg: str) -> str:
        f = self.selected()
        if f is None:
            raise DebugError("No stack.")
        lines = [f"Stack level {f.level}, frame at pc {f.pc:#x}" if f.pc is not None
                 else f"Stack level {f.level}",
                 f" {f.function()} ({f.where() or 'no line info'}); address space: {f.space.name}"]
        if f.entry is not None:
            lines.append(f" first user frame of pid {f.entry.pid} ({f.entry.name}) "
                         "(registers from its trap frame)")
        if f.trap:
            lines.append(" interrupted by a trap (pc = sepc from kernelvec's frame record)")
        return "\n".join(lines)

    def info_symbol(self, arg: str) -> str:
        if not arg:
            raise DebugError("Argument required (address).")
        addr = self.evaluator().integer(arg)
        prog = self.context_program()
        for p in [self.programs.kernel] + ([prog] if prog is not None and prog.user else []):
            hit = p.function(addr)
            if hit is not None:
                sym, off = hit
                return f"{sym.name}{f' + {off}' if off else ''} in {p.name}"
        return f"No symbol matches {arg}."

    def info_line(self, arg: str) -> str:
        if arg:
            locs = self._resolve(arg)
            loc = locs[0]
            prog, addr = loc.program or self.context_program(), loc.addr
        else:
            f = self.selected()
            if f is None or f.pc is None:
                raise DebugError("No line number information available.")
            prog, addr = f.program, f.pc
        row = prog.row(addr) if prog is not None else None
        if row is None:
            return f"No line number information available for address {addr:#x}."
        return (f'Line {row.line} of "{row.file}" is at address {addr:#x}'
                f"{self._sym_tag(prog, addr)}.")

    def info_mem(self, arg: str) -> str:
        """Mappings of the current page table (or of process PID's)."""
        if arg:
            p = self.t.procs.by_pid(self.evaluator().integer(arg)) if self.t.procs else None
            if p is None:
                raise DebugError(f"No process with pid {arg}.")
            space = self.t.proc_space(p)
        else:
            space = self.t.space()
        if space.root is None:
            return f"{space.name}: paging is off (virtual = physical)"
        runs: list[list[int]] = []  # [va, pa, size, flags]
        for va, pa, size, flags in space.mappings():
            if runs and runs[-1][0] + runs[-1][2] == va and runs[-1][1] + runs[-1][2] == pa \
                    and runs[-1][3] == flags:
                runs[-1][2] += size
            else:
                runs.append([va, pa, size, flags])
        out = [f"page table of {space.name} (root {space.root:#x}):",
               "  virtual            physical           size       perm"]
        for va, pa, size, flags in runs:
            out.append(f"  {va:<#18x} {pa:<#18x} {size:<#10x} {flags_text(flags)}")
        return "\n".join(out)

    def info_programs(self, arg: str) -> str:
        out = [f"kernel  {self.programs.kernel.path}"]
        for name in self.programs.user_names():
            p = self.programs.user(name)
            out.append(f"{name:<7} {p.path if p else '?'}")
        return "\n".join(out)

    def info_source(self, arg: str) -> str:
        if self.list_pos is None:
            return "No current source file."
        p = self.list_pos
        return (f"Current source file is {p.file} ({p.program.name})\n"
                f"Located in {p.program.lines.source_path(p.file)}")
