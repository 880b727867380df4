"""The `fleet serve` wire format: typed msgspec structs under /v1/, one definition for both ends."""
