"""`fleet serve`: the service layer over HTTP/1.1 + JSON on a Unix socket (aiohttp)."""
