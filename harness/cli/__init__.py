"""The `harness` command line: click only (options parsed, one library call made)."""
