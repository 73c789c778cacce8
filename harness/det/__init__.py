"""Deterministic mode: the exact instruction counter, seeded schedules, the timeline
of host results at guest times, and the journal a recording keeps."""
