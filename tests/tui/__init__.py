"""TUI tests: Pilot behaviour, snapshots, end-to-end and tmux smoke tests."""
