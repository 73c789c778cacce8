"""`harness top`: watch a running machine's AI service (harness/monitor/)."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("socket_path", required=False, type=click.Path(path_type=Path),
                metavar="[SOCKET]")
@click.option("--record", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write every snapshot shown to FILE (JSON lines) for --replay.")
@click.option("--replay", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              metavar="FILE", help="Step through a recorded FILE instead (n/p/g/G, q quits).")
@click.option("--frame", type=int, metavar="N",
              help="With --replay: print frame N (1-based; -1 the last) and exit.")
def top(socket_path: Path | None, record: Path | None, replay: Path | None,
        frame: int | None) -> None:
    """Live view of a running machine's AI service: request slots, the queue, the
    workers, the device, every process asleep in the service (what it waits for, who
    will wake it) and the counters.

    \b
    terminal 1:  harness run --model smol --monitor      (announces its socket)
    terminal 2:  harness top                             (the newest machine of yours)
                 harness top --record bp.jsonl           (and keep what it showed)
                 harness top --replay bp.jsonl           (step through it later)
    Inside tmux, `harness run --monitor` opens the view in a split pane itself.
    """
    from harness.monitor import view

    if replay is not None:
        try:
            snaps = view.read_record(replay)
        except (OSError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        if frame is not None:
            if not (-len(snaps) <= frame <= len(snaps)) or frame == 0:
                raise click.ClickException(f"--frame wants 1..{len(snaps)} or -1")
            snap = snaps[frame - 1 if frame > 0 else frame]
            click.echo("\n".join(view.render(snap, f"{replay.name} frame {frame}")))
            return
        if not sys.stdin.isatty():
            raise click.ClickException("--replay steps with the keys: run it on a terminal "
                                       "(or print one frame with --frame N)")
        view.replay(snaps, sys.stdout, replay.name)
        return
    if socket_path is None:
        from harness.monitor.feed import newest_socket

        socket_path = newest_socket()
        if socket_path is None:
            raise click.ClickException("no running machine to watch: start one with "
                                       "`harness run --model smol --monitor`")
    f = open(record, "w") if record else None  # noqa: SIM115
    try:
        n = view.live(socket_path, sys.stdout, f)
    except OSError as exc:
        raise click.ClickException(f"cannot attach to {socket_path}: {exc}") from None
    finally:
        if f is not None:
            f.close()
    click.echo(f"[harness] the machine stopped ({n} snapshots shown)", err=True)
