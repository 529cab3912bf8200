"""The Heron instance: one OS process running one spout or bolt task (DESIGN.md §3)."""
