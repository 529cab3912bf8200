"""Example topologies in Heron's layout (Bittern's tests)."""
