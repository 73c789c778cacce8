"""Running a machine for a user: launching it, the terminal, the host API, prompts,
traces, fault reports, recordings, and the fuzz, stress and race-seed loops."""
