"""Clients of `fleet serve`: RemoteFleet over the Unix socket, and which server (if any) to use."""
