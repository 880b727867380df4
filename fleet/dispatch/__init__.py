"""Running tasks on hosts: launch detached, follow, cancel, reconcile, queue, and `fleet run`."""
