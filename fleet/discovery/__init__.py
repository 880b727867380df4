"""mDNS/DNS-SD discovery: browse, candidates, adoption, auto-adoption and `fleet announce`."""

# HostSpec.source of hosts that come from the database because they were adopted; the recorder
# keeps their hosts-table source "adopted" so they stay managed across probes.
ADOPTED_SPEC_SOURCE = "adopted (fleet database)"
