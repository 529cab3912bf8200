"""The supervisor: starts a topology's containers, restarts what dies, stops it all."""
