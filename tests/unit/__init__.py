"""Fast unit tests of the pure modules (no processes, no sockets)."""
