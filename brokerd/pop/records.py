"""The revive log's records: what a POP broker writes into queue 0 of its revive topic
(``rmq_sys_REVIVE_LOG_<cluster>``), one message per record, msgpack bodies, the record type in TAGS. Pure code.

* ``ops``: the operations one append carries, in the order their effects were applied (``encode_ops``): acks
  (offsets of one checkpoint acknowledged: ACK_MESSAGE, BATCH_ACK_MESSAGE), at most one checkpoint or renew, and
  admin offset resets. Acks are applied when they arrive and written at the end of the loop turn, or ahead of the
  next record appended before that (so the log's order is the order of application); many acks share a record.
  Group and topic names are written once per record (a name table), offsets as runs relative to the checkpoint's
  start (a pop of 32 consecutive messages is ``[0, 32]``).

  - a checkpoint (``Checkpoint``): a pop handed out ``offsets`` of one queue: who (group), what (topic — the
    topic or its POP retry topic — and queue), when (``pop_time``, ``invisible`` ms), where the read started and
    where the queue's next pop starts (``next``); FIFO pops also carry each message's delivery count;
  - ``Renew``: CHANGE_MESSAGE_INVISIBLETIME: one offset of a checkpoint moves into a new one-message checkpoint
    popped at ``new_pop_time`` (the old handle is dead, the new one answers); for FIFO, the offset's deadline moves;
  - ``Reset``: an admin reset the group's offset of the queue (resetOffsetByTime, INVOKE_BROKER_TO_RESET_OFFSET):
    its next pop reads from ``offset``.
* revive batches are bracketed on the same queue (``brokerd.logbatch``, which adds the digests of the deliveries
  to BEGIN): BEGIN lists the checkpoint offsets the batch resolves (``deliver``: each with one delivery — retry
  topic or DLQ — in order; ``drop``: resolved without one, the message is gone), the deliveries follow, END closes
  it (``cut``/``n``: a batch cut by a crash, closed at the next start: only its first ``n`` deliveries were made);
* STATE chunks: a snapshot of the whole state (``state.PopState.snapshot``), split in chunks written in one run,
  so a rebuild reads the last complete snapshot and the records after it.

A checkpoint is named by ``CkKey`` = (group, topic, queue id, start offset, pop time): RocketMQ's merge key, and
exactly what a client's checkpoint string carries (with the topic mark, the queue id from the request).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgpack

TAG_OPS: Final = "ops"
FORMAT: Final = 1  # the layout version of BEGIN, END and STATE bodies
OPS_FORMAT: Final = 2  # of ``ops`` bodies
MAX_RUN_OFFSETS: Final = 1 << 20  # offsets one operation may name (a record that says more is not read)
_OP_ACK, _OP_CK, _OP_RENEW, _OP_RESET = 0, 1, 2, 3

CkKey = tuple[str, str, int, int, int]  # group, topic, queue id, start offset, pop time
QKey = tuple[str, str, int]  # group, topic, queue id
Item = tuple[str, str, int, int, int, int]  # a checkpoint key and one of its offsets


class RecordError(ValueError):
    """A revive-log record this broker cannot read."""


@dataclass(slots=True)
class Checkpoint:  # not frozen: one is made per pop, and a frozen dataclass's __init__ costs six times as much
    group: str
    topic: str
    queue_id: int
    start: int  # where the read began (the ckQueueOffset of the handles)
    pop_time: int
    invisible: int
    offsets: tuple[int, ...] | range  # ascending; a range when the read handed out every offset it passed
    next: int  # the queue's next pop position after this read
    order: bool = False
    counts: tuple[int, ...] = ()  # FIFO: each offset's previous deliveries (its reconsume times)

    @property
    def key(self) -> CkKey:
        return (self.group, self.topic, self.queue_id, self.start, self.pop_time)

    @property
    def qkey(self) -> QKey:
        return (self.group, self.topic, self.queue_id)

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible


@dataclass(slots=True)
class Ack:  # not frozen: made per acknowledged checkpoint
    key: CkKey
    offsets: tuple[int, ...] | range


@dataclass(frozen=True, slots=True)
class Renew:
    key: CkKey
    offset: int
    new_pop_time: int  # normal: the new checkpoint's pop time; FIFO: unchanged (the handle keeps its pop time)
    invisible: int  # normal: the new checkpoint's invisible time; FIFO: ms from new_pop_time to the new deadline


@dataclass(frozen=True, slots=True)
class Reset:
    """An admin reset the group's consumer offset of the queue: its next pop reads from ``offset``."""

    qkey: QKey
    offset: int


Op = Checkpoint | Ack | Renew | Reset


def encode_ops(ops: Sequence[Op]) -> bytes:
    """One ``ops`` record: ``[2, names, rows]``, each row an operation naming group and topic by their index in
    ``names``, offsets as runs from the checkpoint's start (``runs``)."""
    names: dict[str, int] = {}

    def ix(name: str) -> int:
        i = names.get(name)
        if i is None:
            i = names[name] = len(names)
        return i

    rows: list[list[Any]] = []
    for op in ops:
        if type(op) is Ack:
            g, t, q, s, pt = op.key
            rows.append([_OP_ACK, ix(g), ix(t), q, s, pt, runs(op.offsets, s)])
        elif type(op) is Checkpoint:
            row = [_OP_CK, ix(op.group), ix(op.topic), op.queue_id, op.start, op.pop_time, op.invisible,
                   runs(op.offsets, op.start), op.next - op.start]
            if op.order:
                row.append(list(op.counts))
            rows.append(row)
        elif type(op) is Renew:
            g, t, q, s, pt = op.key
            rows.append([_OP_RENEW, ix(g), ix(t), q, s, pt, op.offset, op.new_pop_time, op.invisible])
        elif type(op) is Reset:
            g, t, q = op.qkey
            rows.append([_OP_RESET, ix(g), ix(t), q, op.offset])
        else:
            raise TypeError(f"not a revive-log operation: {op!r}")
    return _pack([OPS_FORMAT, list(names), rows])


def decode_ops(data: bytes) -> list[Op]:
    b = _unpack(data, 3, "ops", OPS_FORMAT)
    names = [_s(n) for n in _list(b[1])]
    out: list[Op] = []
    try:
        for row in _list(b[2]):
            out.append(_op(_list(row), names))
    except IndexError:
        raise RecordError("ops: a row names an unknown group or topic, or is short") from None
    return out


def _op(row: list[Any], names: list[str]) -> Op:
    kind = _i(row[0])
    g, t, q = names[_i(row[1])], names[_i(row[2])], _i(row[3])
    if kind == _OP_ACK and len(row) == 7:
        s = _i(row[4])
        return Ack((g, t, q, s, _i(row[5])), offsets_of(row[6], s))
    if kind == _OP_CK and len(row) in (9, 10):
        s = _i(row[4])
        offsets = offsets_of(row[7], s)
        counts = tuple(_ints(row[9])) if len(row) == 10 else ()
        if counts and len(counts) != len(offsets):
            raise RecordError("ck: counts and offsets differ in length")
        return Checkpoint(g, t, q, s, _i(row[5]), _i(row[6]), offsets, s + _i(row[8]), len(row) == 10, counts)
    if kind == _OP_RENEW and len(row) == 9:
        return Renew((g, t, q, _i(row[4]), _i(row[5])), _i(row[6]), _i(row[7]), _i(row[8]))
    if kind == _OP_RESET and len(row) == 5:
        return Reset((g, t, q), _i(row[4]))
    raise RecordError(f"ops: unknown operation {kind} of {len(row)} fields")


def runs(offsets: Sequence[int], base: int) -> list[int]:
    """``offsets`` as ``[gap, length, gap, length, ...]``: each run of consecutive offsets starts ``gap`` after the
    end of the previous one (the first: after ``base``). Any sequence is kept exactly, in its order."""
    out: list[int] = []
    if not offsets:
        return out
    if type(offsets) is range and offsets.step == 1:
        return [offsets.start - base, len(offsets)]
    first, n = offsets[0], len(offsets)
    if offsets[-1] - first == n - 1 and (n < 3 or tuple(offsets) == tuple(range(first, first + n))):
        return [first - base, n]  # one run: what a pop of consecutive messages hands out
    end = base
    prev = first
    for o in offsets[1:]:
        if o == prev + 1:
            prev = o
            continue
        out += (first - end, prev - first + 1)
        end = prev + 1
        first = prev = o
    out += (first - end, prev - first + 1)
    return out


def offsets_of(raw: Any, base: int) -> tuple[int, ...]:
    """The inverse of ``runs``."""
    flat = _ints(raw)
    if len(flat) % 2:
        raise RecordError("offset runs: odd length")
    out: list[int] = []
    end = base
    for i in range(0, len(flat), 2):
        n = flat[i + 1]
        if n < 1 or len(out) + n > MAX_RUN_OFFSETS:
            raise RecordError("offset runs: bad run length")
        first = end + flat[i]
        out.extend(range(first, first + n))
        end = first + n
    return tuple(out)


@dataclass(frozen=True, slots=True)
class BatchBegin:
    """BEGIN of a revive batch (its payload: ``brokerd.logbatch`` wraps it with the deliveries' digests):
    ``deliver`` items each get one delivery, in this order; ``drop`` items none."""

    deliver: tuple[Item, ...]
    drop: tuple[Item, ...]

    def encode(self) -> bytes:
        return _pack([FORMAT, [list(i) for i in self.deliver], [list(i) for i in self.drop]])

    @classmethod
    def decode(cls, data: bytes) -> BatchBegin:
        b = _unpack(data, 3, "BEGIN")
        return cls(tuple(_item(i) for i in _list(b[1])), tuple(_item(i) for i in _list(b[2])))


@dataclass(frozen=True, slots=True)
class BatchEnd:
    cut: bool = False  # the batch was cut (crash, failover): only the first ``delivered`` deliveries exist
    delivered: int = 0

    def encode(self) -> bytes:
        return _pack([FORMAT, self.cut, self.delivered])

    @classmethod
    def decode(cls, data: bytes) -> BatchEnd:
        b = _unpack(data, 3, "END")
        return cls(bool(b[1]), _i(b[2]))


@dataclass(frozen=True, slots=True)
class StateChunk:
    index: int
    total: int
    data: bytes

    def encode(self) -> bytes:
        return _pack([FORMAT, self.index, self.total, self.data])

    @classmethod
    def decode(cls, data: bytes) -> StateChunk:
        b = _unpack(data, 4, "STATE")
        if not isinstance(b[3], bytes) or not 0 <= _i(b[1]) < _i(b[2]):
            raise RecordError("STATE: bad chunk")
        return cls(_i(b[1]), _i(b[2]), b[3])


def state_chunks(data: bytes, chunk_size: int) -> list[StateChunk]:
    parts = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)] or [b""]
    return [StateChunk(i, len(parts), p) for i, p in enumerate(parts)]


# ---------------------------------------------------------------------------------------------- helpers


def _pack(obj: Any) -> bytes:
    out: bytes = msgpack.packb(obj, use_bin_type=True)
    return out


def _unpack(data: bytes, n: int, what: str, fmt: int = FORMAT) -> list[Any]:
    try:
        b = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated exception types
        raise RecordError(f"{what}: not msgpack: {e}") from e
    if not isinstance(b, list) or len(b) != n or b[0] != fmt:
        raise RecordError(f"{what}: unknown layout")
    return b


def _i(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise RecordError(f"expected an integer, got {type(v).__name__}")
    return v


def _s(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise RecordError("expected a non-empty string")
    return v


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise RecordError("expected a list")
    return v


def _ints(v: Any) -> list[int]:
    return [_i(x) for x in _list(v)]


def _item(v: Any) -> Item:
    b = _list(v)
    if len(b) != 6:
        raise RecordError("a batch item has 6 fields")
    return (_s(b[0]), _s(b[1]), _i(b[2]), _i(b[3]), _i(b[4]), _i(b[5]))
