"""SSH connections to hosts with a strict host-key policy and bounded waits."""
