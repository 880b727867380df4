"""The TUI's screens and dialogs."""
