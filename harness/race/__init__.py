"""Concurrency checks on the running kernel: lock order and lock misuse (lockdep.py),
run over seeded schedules (runner.py, `harness race`)."""
