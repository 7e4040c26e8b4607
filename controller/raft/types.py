"""Value types shared by the pure Raft core, the storage layer, the driver and the simulator.

Pure data, no I/O. `Entry` and `Message` are hot-path objects (one per proposal, one per frame), so they
are plain `__slots__` classes rather than dataclasses; everything else is a frozen dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

NONE_ID: Final = ""  # "no node" in wire/persistent formats (a vote for nobody, no known leader)


class EntryKind(IntEnum):
    NORMAL = 0  # application data, handed to StateMachine.apply
    NOOP = 1  # appended by a new leader to commit an entry of its own term; never applied


class Entry:
    """One log entry. Immutable by convention: never mutate an Entry after it is created."""

    __slots__ = ("index", "term", "kind", "data")

    def __init__(self, index: int, term: int, kind: int = EntryKind.NORMAL, data: bytes = b"") -> None:
        self.index = index
        self.term = term
        self.kind = kind
        self.data = data

    def __repr__(self) -> str:
        return f"Entry({self.index}, t{self.term}, k{self.kind}, {len(self.data)}B)"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Entry):
            return NotImplemented
        return (self.index, self.term, self.kind, self.data) == (other.index, other.term, other.kind, other.data)

    def __hash__(self) -> int:
        return hash((self.index, self.term, self.kind, self.data))


class MsgType(IntEnum):
    APP = 1
    APP_RESP = 2
    VOTE = 3
    VOTE_RESP = 4
    PRE_VOTE = 5
    PRE_VOTE_RESP = 6
    HEARTBEAT = 7
    HEARTBEAT_RESP = 8
    SNAP = 9
    READ_INDEX = 10
    READ_INDEX_RESP = 11


class Message:
    """A peer message. Fields unused by a message type keep their defaults.

    - APP: `index`/`log_term` = the entry preceding `entries`; `commit` = leader commit.
    - APP_RESP: `index` = last index matched (accept) or the rejected `index` (reject, with `reject_hint`
      and `log_term` = the follower's term at the hint: etcd's conflict-by-term optimisation).
    - VOTE / PRE_VOTE: `index`/`log_term` = the candidate's last entry. PRE_VOTE carries the *next* term.
    - HEARTBEAT(_RESP): `ctx` = the newest pending ReadIndex context; `commit` = min(match, commit).
    - `lease_tick`: the leader's tick counter when it sent APP/HEARTBEAT; followers echo it so the leader
      can measure its lease from the *send* time of quorum-acknowledged messages.
    - READ_INDEX(_RESP): follower read; `ctx` identifies the request, `index` is the read index.
    """

    __slots__ = (
        "type", "frm", "to", "term", "log_term", "index", "commit", "entries",
        "reject", "reject_hint", "ctx", "snapshot", "lease_tick",
    )

    def __init__(
        self,
        type: int,
        frm: str,
        to: str,
        term: int = 0,
        *,
        log_term: int = 0,
        index: int = 0,
        commit: int = 0,
        entries: list[Entry] | None = None,
        reject: bool = False,
        reject_hint: int = 0,
        ctx: bytes = b"",
        snapshot: Snapshot | None = None,
        lease_tick: int = 0,
    ) -> None:
        self.type = type
        self.frm = frm
        self.to = to
        self.term = term
        self.log_term = log_term
        self.index = index
        self.commit = commit
        self.entries: list[Entry] = entries if entries is not None else []
        self.reject = reject
        self.reject_hint = reject_hint
        self.ctx = ctx
        self.snapshot = snapshot
        self.lease_tick = lease_tick

    def __repr__(self) -> str:
        name = MsgType(self.type).name
        extra = f" rej hint={self.reject_hint}" if self.reject else ""
        return (
            f"{name} {self.frm}->{self.to} t{self.term} i{self.index} lt{self.log_term} c{self.commit}"
            f" n={len(self.entries)}{extra}{' ctx' if self.ctx else ''}{' snap' if self.snapshot else ''}"
        )


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before any message that depends on it is sent."""

    term: int = 0
    vote: str = NONE_ID
    commit: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A state-machine image covering the log up to and including `index` (whose term is `term`)."""

    index: int
    term: int
    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class ReadState:
    """A confirmed read index: the read for `ctx` may be served once applied >= `index`.

    `lagging` is set for follower reads refused because the follower's commit index trails the leader's
    read index by more than `max_follower_lag_entries`.
    """

    index: int
    ctx: bytes
    lagging: bool = False


class Role(IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


@dataclass(slots=True)
class Ready:
    """Work handed out by `RaftCore.ready()`; handle in this order, then call `RaftCore.advance(ready)`:

    1. persist `snapshot` (if any), `entries` and `hard_state` (fsync when `must_sync`);
    2. send `messages` (they may depend on what step 1 made durable);
    3. restore `snapshot` into the state machine, apply `committed_entries`, serve `read_states`
       once applied >= their index;
    4. `advance(ready)`.

    Leader replication traffic that does not depend on unpersisted state is available earlier through
    `RaftCore.take_early_messages()` (Raft thesis §10.2.1: the leader writes its log in parallel with
    replicating it); it is never duplicated into `messages`.
    """

    hard_state: HardState | None
    entries: list[Entry]
    snapshot: Snapshot | None
    committed_entries: list[Entry]
    messages: list[Message]
    read_states: list[ReadState]
    must_sync: bool
