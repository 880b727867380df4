"""The monitor: pooled SSH connections, streaming probes, batched recording, live snapshots."""
