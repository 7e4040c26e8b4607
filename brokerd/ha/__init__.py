"""AutoSwitch HA (RocketMQ 5, RIP-44): commit-log replication between the brokers of one broker set.

Pure, sans-I/O parts (no sockets, no asyncio): ``wire`` (the HA port's codec), ``log`` (what the core needs of a
store, plus an in-memory log), ``config``, ``actions`` (core outputs, the log side of becoming master),
``master`` and ``slave`` (the replication state machines). Asyncio drivers wrap them.
"""
