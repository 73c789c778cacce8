"""`harness top`: the AI service of a running machine, live (or replayed).

The machine's emulation thread takes a snapshot between run slices (a callback posted
like any device event, so what is read is consistent); the snapshot is read through
harness/guest/ (the kernel's `ai` service struct and process table, laid out by the
kernel's own DWARF) and the AI device's state; it never asks the kernel to print. One
file per concept:

    service.py    one snapshot: slots, queue, workers, device, sleepers (from the guest)
    channels.py   a wait channel in words and who will wake it
    counters.py   what only a series of snapshots shows: blocked submits, wake-ups, rates
    feed.py       the machine side: periodic snapshots to a Unix socket and/or a file
    view.py       the panels as text, the live viewer and the replay stepper
"""
