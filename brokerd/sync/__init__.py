"""Incremental metadata sync master → slave (RIP-81): change records in the commit log (``records``), the pure
apply function and image (``image``), the master's journal (``journal``), the slave's follower (``follower``),
snapshots (``snapshot``) and their orchestration per broker (``service``)."""
