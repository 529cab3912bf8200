"""The parts of scripts/bench.py: one module per concern (see bench.py's docstring)."""
