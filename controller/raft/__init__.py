"""Raft consensus for the controller daemon.

Layout (pure modules first; only driver.py and transport.py touch asyncio):

- types.py      Entry, Message, HardState, Snapshot, ReadState, Ready (value types)
- log.py        RaftLog: in-memory log with compaction offset and stable/commit/apply marks
- progress.py   per-follower replication state (probe / replicate / snapshot, in-flight window)
- read_only.py  ReadIndex bookkeeping
- core_config.py CoreConfig: tick-based core parameters (core.py re-exports it)
- core.py       RaftCore (+ leader.py mixin): the pure etcd-style state machine
                tick / step / propose / read_index / lease_read / ready / advance
                (core imports leader, never the other way round)
- storage.py    WAL record kinds, replay and recovery rules, disk-operation plans (pure)
- waiters.py    proposal/read waiters keyed by index / ctx (pure; driver and simulator share it)
- codec.py      length-prefixed msgpack frames for peer traffic
- wal.py, snapshot.py   file WAL (CRC per record, torn-tail truncation) and atomic snapshot images
- transport.py  asyncio TCP peer transport (one connection per pair, reconnect with backoff)
- driver.py     RaftNode: the asyncio driver; api.py re-exports the public names
                (RaftConfig, RaftNode, StateMachine, NotLeaderError, ReadLaggingError, CommitUnknownError)

Tests: tests/unit/raft (core cases), tests/sim (seeded whole-cluster simulation + linearizability),
tests/integration/raft (real sockets and files). Replay a simulation: scripts/sim.py --seed N.
"""
