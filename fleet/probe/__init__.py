"""Agentless probe: the program sent to a host's python3, its bundle, and parsing its output."""
