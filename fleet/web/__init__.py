"""The read-only web view of `fleet serve`: pages, live updates, vendored assets, `fleet web`."""
