"""The machine around the guest: Unicorn CPU, devices, run loop, CLI, debugger and bench."""
