"""One hart's registers, the guest's RAM and the machine's clock: the primitives over Unicorn."""
