"""Per-container daemons: the stream manager, and (in container 0) the topology master."""
