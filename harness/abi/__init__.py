"""What the kernel's C headers define, read for the harness (the one source of truth)."""
