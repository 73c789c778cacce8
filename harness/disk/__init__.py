"""The guest's disk: the file-system image, booting from an image in memory, and the
crash-point tester and image fuzzer built on it."""
