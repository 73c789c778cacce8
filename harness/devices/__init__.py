"""Device models of the machine, one class per file (see harness/machine.py for the map)."""
