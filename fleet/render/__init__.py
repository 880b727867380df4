"""Text and JSON renderings shared by the CLI, the demo and the TUI (no I/O, light imports)."""
