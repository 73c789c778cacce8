"""The command interpreter of `harness debug`: gdb's commands, one method each.

`Interpreter.execute(line)` runs one command and returns its output as text (a
DebugError carries the message of a command that failed), so tests and the GDB stub's
`monitor` command drive it exactly as the prompt does. Commands may be abbreviated to
any unique prefix, and gdb's short aliases work (b, c, s, n, si, ni, bt, p, x, l, i r).
"""

from __future__ import annotations

import re

from harness.debug import DebugError
from harness.debug.cmd_data import DataCommands
from harness.debug.cmd_exec import ExecCommands
from harness.debug.cmd_info import InfoCommands
from harness.debug.cmd_locks import LockCommands
from harness.debug.cmd_points import PointCommands
from harness.debug.cmd_reverse import ReverseCommands
from harness.debug.cmdbase import ALIASES, INFO_SUBCOMMANDS
from harness.debug.expr import CSR_REGS, REGISTERS


class Interpreter(PointCommands, ExecCommands, ReverseCommands, DataCommands,
                  InfoCommands, LockCommands):
    """gdb-style commands over one Target: dispatch, help and completion here, the
    commands in the cmd_*.py mixins, shared state in cmdbase.CommandBase."""

    # ---------------------------------------------------------------- dispatch
    def execute(self, line: str) -> str:
        line = line.strip()
        if not line or line.startswith("#"):
            return ""
        m = re.match(r"([A-Za-z-]+)(.*)$", line)
        if not m:
            raise DebugError(f'Undefined command: "{line}".  Try "help".')
        word, arg = m.group(1), m.group(2)
        return self.commands[self.resolve(word)](arg.strip() if not arg.startswith("/") else arg)

    def resolve(self, word: str) -> str:
        """The command a word names: exact, alias, or unique prefix."""
        word = word.lower()
        if word in self.commands:
            return word
        if word in ALIASES:
            return ALIASES[word]
        hits = [c for c in self.commands if c.startswith(word)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise DebugError(f'Ambiguous command "{word}": {", ".join(sorted(hits))}.')
        raise DebugError(f'Undefined command: "{word}".  Try "help".')

    # ---------------------------------------------------------------- misc
    def cmd_help(self, arg: str) -> str:
        """help [COMMAND]: what a command does."""
        if arg:
            name = self.resolve(arg.split()[0])
            doc = self.commands[name].__doc__ or ""
            return "\n".join(line.strip() for line in doc.strip().splitlines())
        out = ["Commands (abbreviations work: b c s n si ni bt p x l i r; `help CMD` for more):"]
        seen = set()
        for name in sorted(self.commands):
            fn = self.commands[name]
            if fn.__func__ in seen:  # type: ignore[attr-defined]
                continue
            seen.add(fn.__func__)  # type: ignore[attr-defined]
            doc = " ".join(line.strip() for line in (fn.__doc__ or name).strip().splitlines())
            synopsis, _, rest = doc.partition(": ")
            out.append(f"  {synopsis:<34} {rest.split('. ')[0].rstrip('.')}".rstrip())
        return "\n".join(out)

    def cmd_quit(self, arg: str) -> str:
        """quit: leave the debugger (the machine stops)."""
        self.quit_requested = True
        return ""

    # ---------------------------------------------------------------- completion
    def completions(self, text: str, line: str) -> list[str]:
        """Candidates for the word `text` being typed at the end of `line`."""
        words = line.split()
        first = len(words) == 0 or (len(words) == 1 and not line.endswith(" "))
        if first:
            names = sorted(set(self.commands) | set(ALIASES))
            return [n for n in names if n.startswith(text)]
        cmd = self.resolve(words[0]) if words else ""
        if cmd == "info" and (len(words) == 1 or (len(words) == 2 and not line.endswith(" "))):
            return [s for s in INFO_SUBCOMMANDS if s.startswith(text)]
        if text.startswith("$"):
            regs = sorted(set(REGISTERS) | set(CSR_REGS) | {"priv", "pid", "prog"})
            return ["$" + r for r in regs if ("$" + r).startswith(text)]
        return self._symbol_completions(text, cmd)

    def _symbol_completions(self, text: str, cmd: str) -> list[str]:
        out: list[str] = []
        if ":" in text:
            pname, _, rest = text.partition(":")
            p = self.programs.get(pname)
            if p is not None:
                out += [f"{pname}:{s}" for s in p.symbol_names if s.startswith(rest)]
                out += [f"{pname}:{f.rsplit('/', 1)[-1]}:" for f in p.lines.files
                        if f.rsplit("/", 1)[-1].startswith(rest)]
            return sorted(set(out))[:500]
        k = self.programs.kernel
        out += [s for s in k.symbol_names if s.startswith(text)]
        out += [n + ":" for n in self.programs.user_names() if n.startswith(text)]
        if cmd in ("break", "tbreak", "list", "until", "advance"):
            out += [f.rsplit("/", 1)[-1] + ":" for f in k.lines.files
                    if f.rsplit("/", 1)[-1].startswith(text)]
        return sorted(set(out))[:500]
