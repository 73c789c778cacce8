"""Device models of the machine, one class per file (see harness/machine/board.py for the map)."""
