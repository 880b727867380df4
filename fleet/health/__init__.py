"""Health of the fleet: rules that turn probe outcomes into states and events, hooks, retention."""
