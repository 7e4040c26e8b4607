"""One remoting connection (asyncio BufferedProtocol) shared by servers and clients.

Both sides may send requests: a frame with the response flag completes the pending request with the same
opaque; any other frame is a request dispatched to the processor table. Responses of synchronous handlers
produced by one read are written with a single write (pipelining).

Every read carries its arrival (``Connection.arrived``, time.monotonic scale): on a server's connections when its
bytes became readable, from the kernel's receive stamps (arrival.py), elsewhere when the read began. A read is
handled as it comes while the loop turn's handling budget lasts; past it, reads are still taken off the socket
but kept, with their arrival, and handled from the next turns on (turns.py): a request's whole wait is in the
process, where the send admission rule (processors/admission.py) sees it.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

import structlog

from brokerd.remoting.arrival import ArrivalClock
from brokerd.remoting.codec import MAX_FRAME, FrameDecoder, FrameError, Received, encode, encode_parts
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, HeaderError, RemotingCommand
from brokerd.remoting.turns import READS_PER_TURN, Turns

log = structlog.get_logger("remoting")

FULL_READ = 256_000  # the read buffer (``_ReadBuffer``; uvloop's own is as large): a read this large left more
BACKLOG_MAX = 32 << 20  # bytes read ahead of handling per connection (turns.py); more: not read until half handled

HandlerResult = RemotingCommand | None | Awaitable[RemotingCommand | None]
# A fast lane for a dispatcher: (connection, buffer, position, response list) -> new position. It handles the
# requests it can from the position on, appends their response frames, and stops at the first it cannot.
Lane = Callable[["Connection", Received, int, list[bytes | memoryview]], int]
# A dispatcher's access check (ACL): (connection, request) -> None to serve it, or the NO_PERMISSION remark.
Guard = Callable[["Connection", RemotingCommand], str | None]


class Handler(Protocol):
    def __call__(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult: ...


class RemotingTimeout(Exception):
    pass


class ConnectionClosed(Exception):
    pass


_opaque_counter = itertools.count(1)


def next_opaque() -> int:
    return next(_opaque_counter) & 0x7FFFFFFF


class Dispatcher:
    """Maps request codes to handlers; unknown codes answer REQUEST_CODE_NOT_SUPPORTED."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.handlers: dict[int, Handler] = {}
        self.default: Handler | None = None
        self.lane: Lane | None = None
        self.not_ready: str | None = None  # set: every request is answered SYSTEM_BUSY with this remark
        self.guard: Guard | None = None  # set: checked before any handler runs (a lane takes only what it allows)
        self.after_read: Callable[[], None] | None = None  # run after each read is handled (e.g. syncer.poll)
        # seconds after its arrival a kept read is handled at once, whatever its turn (turns.py); 0: never
        self.stale_after: Callable[[], float] | None = None
        self._soon: list[Connection] = []  # connections with frames queued by ``write_soon``

    def queue_soon(self, conn: Connection) -> None:
        """``conn`` has frames from ``write_soon``: written at the end of the read being handled, else at the loop's
        next turn."""
        if not self._soon:
            conn.closed.get_loop().call_soon(self.flush_soon)  # get_running_loop() costs a getpid() on 3.11
        self._soon.append(conn)

    def flush_soon(self) -> None:
        conns, self._soon = self._soon, []
        for c in conns:
            c.flush_soon()

    def read_done(self) -> None:
        """After each read a connection of this dispatcher handled."""
        if self.after_read is not None:
            self.after_read()
        if self._soon:
            self.flush_soon()

    def register(self, code: int, handler: Handler) -> None:
        self.handlers[code] = handler

    def register_all(self, table: dict[int, Handler]) -> None:
        self.handlers.update(table)

    def lookup(self, code: int) -> Handler | None:
        if self.not_ready is not None:
            return self._busy
        return self.handlers.get(code, self.default)

    def _busy(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ResponseCode.SYSTEM_BUSY, self.not_ready)


def _error_response(cmd: RemotingCommand, exc: BaseException) -> RemotingCommand:
    if isinstance(exc, HeaderError):
        return cmd.response(exc.code, str(exc))
    return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")


class _ReadBuffer(threading.local):
    """The buffer every read of a thread's connections lands in (``Connection.get_buffer``): an event loop reads one
    socket at a time and each read is handled before the next, so one buffer per thread (its loop) serves them all.
    A read is decoded where the kernel put it, not copied into a new bytes object first; what a read leaves over
    (the start of a frame still arriving) is copied out by ``FrameDecoder.consumed``."""

    def __init__(self) -> None:
        self.view = memoryview(bytearray(FULL_READ))
        self.turns = Turns()  # this thread's loop turns: how much handling each may do (turns.py)


_reads = _ReadBuffer()


def loop_turns() -> Turns:
    """This thread's loop turns (turns.py): reads kept and bytes kept, for /metrics."""
    return _reads.turns


class Connection(asyncio.BufferedProtocol):
    def __init__(
        self,
        dispatcher: Dispatcher | None,
        on_close: Callable[[Connection], None] | None = None,
        max_frame: int = MAX_FRAME,
        read_backpressure: bool = False,
        stamp_arrival: bool = False,
    ) -> None:
        self.dispatcher = dispatcher
        self._on_close = [on_close] if on_close else []
        self._decoder = FrameDecoder(max_frame)
        self.transport: asyncio.Transport | None = None
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.closed = asyncio.get_running_loop().create_future()
        self.remote_addr: tuple[str, int] = ("0.0.0.0", 0)
        self.local_addr: tuple[str, int] = ("0.0.0.0", 0)
        self.inflight: set[asyncio.Future[Any]] = set()
        self.attrs: dict[str, object] = {}  # per-connection state for processors (e.g. client id)
        self._paused = False
        # a server's connection stops reading while its answers cannot be written (the peer does not read them):
        # what a client offers stays in its socket, not in this process
        self._read_backpressure = read_backpressure
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._read_held = False  # flow control (``hold_reading``): not read until ``release_reading``
        self._full_reads = 0  # in the loop turn ``_turn``
        self._turn = -1
        # reads taken off the socket but not handled yet, with their arrival (turns.py), oldest first
        self._backlog: deque[tuple[bytes, float]] = deque()
        self._backlog_bytes = 0
        self._queued = False  # in the loop turns' round-robin of connections with kept reads
        self._backlog_full = False  # BACKLOG_MAX read ahead: not read until half of it is handled
        self._later: list[bytes | memoryview] = []  # frames queued by ``write_soon``
        # when the bytes of the read being handled became readable (time.monotonic scale; arrival.py): a server's
        # connections ask the kernel (``stamp_arrival``), others take the time the read began
        self.arrived = 0.0
        self._stamp_arrival = stamp_arrival
        self._clock: ArrivalClock | None = None

    # -- asyncio.BufferedProtocol -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports don't subclass asyncio's
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        if peer:
            self.remote_addr = (peer[0], peer[1])
        if sock:
            self.local_addr = (sock[0], sock[1])
        if self._stamp_arrival:
            raw = transport.get_extra_info("socket")
            fd = raw.fileno() if raw is not None else -1
            if fd >= 0:
                self._clock = ArrivalClock(fd)

    def get_buffer(self, sizehint: int) -> memoryview:
        """Called right before each read of the socket."""
        clock = self._clock
        self.arrived = clock.before_read() if clock is not None else time.monotonic()
        return _reads.view

    def buffer_updated(self, nbytes: int) -> None:
        if self._clock is not None:
            self._clock.after_read(nbytes >= FULL_READ)
        self._read(_reads.view[:nbytes])

    def data_received(self, data: Received) -> None:
        """One read's bytes (arrived now), handled now (after any kept reads: turns.py keeps only the transport's
        reads): nothing may keep them (or a view of them) after this returns."""
        self.arrived = time.monotonic()
        if self._backlog:
            self._defer(bytes(data))
        else:
            self._handle_read(data)

    def _read(self, data: Received) -> None:
        """A read: handled now, or kept for the loop's next turns (turns.py)."""
        turns = _reads.turns
        if turns.turn != self._turn:
            self._turn, self._full_reads = turns.turn, 0
        if self._backlog or self._full_reads >= READS_PER_TURN or turns.exhausted():
            self._defer(bytes(data))
            return
        t0 = turns.clock()
        self._handle_read(data)
        turns.charge(turns.clock() - t0, self.closed.get_loop())  # get_running_loop: a getpid()
        self._full_reads = self._full_reads + 1 if len(data) >= FULL_READ else 0

    def _handle_read(self, data: Received) -> None:
        out: list[bytes | memoryview] = []
        try:
            lane = self.dispatcher.lane if self.dispatcher is not None else None
            if lane is None:
                for cmd in self._decoder.feed(data):
                    self._handle(cmd, out)
            else:
                self._lane_and_dispatch(lane, data, out)
        except FrameError as e:
            log.warning("frame_rejected", remote=f"{self.remote_addr[0]}:{self.remote_addr[1]}", reason=str(e))
            self.write_frames(out)  # answers to the requests before the bad frame, then close
            self.close()
            return
        self.write_frames(out)
        if self.dispatcher is not None:
            self.dispatcher.read_done()

    def _defer(self, data: bytes) -> None:
        """Keep a read (a copy, with its arrival) for the loop's next turns."""
        self._backlog.append((data, self.arrived))
        self._backlog_bytes += len(data)
        turns = _reads.turns
        turns.kept += 1
        turns.kept_bytes += len(data)
        self._requeue()
        if self._backlog_bytes >= BACKLOG_MAX and not self._backlog_full and self.transport is not None:
            self._backlog_full = True
            self.transport.pause_reading()

    def handle_deferred(self) -> bool:
        """Handle the oldest kept read (turns.py); True while more may be handled now. Not while flow control holds
        the connection or its answers back up (``release_reading`` / ``resume_writing`` queue it again)."""
        backlog = self._backlog
        if backlog and self._may_handle() and self.transport is not None and not self.transport.is_closing():
            data, self.arrived = backlog.popleft()
            self._backlog_bytes -= len(data)
            _reads.turns.kept_bytes -= len(data)
            self._handle_read(data)
        if self.transport is None or self.transport.is_closing():
            self._drop_backlog()
        if self._backlog_full and self._backlog_bytes < BACKLOG_MAX // 2:
            self._backlog_full = False
            if self._may_read():
                self._resume_reading()
        self._queued = bool(backlog) and self._may_handle()
        return self._queued

    def handle_stale(self) -> None:
        """Handle, now, the kept reads that arrived the dispatcher's ``stale_after`` ago or more (turns.py)."""
        limit = self.dispatcher.stale_after() if self.dispatcher is not None and self.dispatcher.stale_after else 0.0
        if limit <= 0:
            return
        backlog = self._backlog
        now = time.monotonic()
        while backlog and now - backlog[0][1] >= limit and self._may_handle() and self.transport is not None \
                and not self.transport.is_closing():  # fmt: skip
            data, self.arrived = backlog.popleft()
            self._backlog_bytes -= len(data)
            _reads.turns.kept_bytes -= len(data)
            self._handle_read(data)

    def _drop_backlog(self) -> None:
        _reads.turns.kept_bytes -= self._backlog_bytes
        self._backlog.clear()
        self._backlog_bytes = 0

    def _may_handle(self) -> bool:
        return not self._read_held and not (self._paused and self._read_backpressure)

    def _requeue(self) -> None:
        """Kept reads may be handled again: back in the loop turns' round-robin."""
        if self._backlog and not self._queued and self._may_handle():
            self._queued = True
            _reads.turns.ready(self, self.closed.get_loop())

    @property
    def backlog(self) -> int:
        """Bytes read off the socket and not handled yet."""
        return self._backlog_bytes

    def _may_read(self) -> bool:
        return not self._read_held and not self._backlog_full and not (self._paused and self._read_backpressure)

    def _lane_and_dispatch(self, lane: Lane, data: Received, out: list[bytes | memoryview]) -> None:
        """The lane takes what it can from the buffer; each frame it stops at is dispatched here, in order."""
        dec = self._decoder
        buf = dec.append(data)
        pos = 0
        try:
            while True:
                pos = lane(self, buf, pos, out)
                cmd, pos = dec.next(buf, pos)
                if cmd is None:
                    break
                self._handle(cmd, out)
        finally:
            dec.consumed(buf, pos)

    def _handle(self, cmd: RemotingCommand, out: list[bytes | memoryview]) -> None:
        if cmd.flag & FLAG_RESPONSE:
            fut = self.pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            return
        self._dispatch(cmd, out)

    @property
    def max_frame(self) -> int:
        return self._decoder.max_frame

    @property
    def buffered(self) -> int:
        """Bytes of a frame received in part, waiting for the rest."""
        return self._decoder.buffered

    def write_frames(self, out: list[bytes | memoryview]) -> None:
        """Write already encoded frames (one writelines)."""
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(out)

    def write_soon(self, frames: list[bytes | memoryview]) -> None:
        """Queue ``frames`` to go out in one write with the others queued for this connection soon (e.g. the
        answers one SYNC_FLUSH group commit released: one write per connection, not one per read they came in):
        at the end of the read being handled (``Dispatcher.read_done``), else at the loop's next turn."""
        if self.dispatcher is None:
            self.write_frames(frames)
            return
        if not self._later:
            self.dispatcher.queue_soon(self)
        self._later.extend(frames)

    def flush_soon(self) -> None:
        frames, self._later = self._later, []
        self.write_frames(frames)

    def _refused(self, guard: Guard, cmd: RemotingCommand) -> str | None:
        try:
            return guard(self, cmd)
        except Exception as e:  # noqa: BLE001 - a check that fails refuses, never crashes the connection
            log.warning("guard_failed", code=cmd.code, error=repr(e))
            return f"access check failed: {type(e).__name__}"

    def _dispatch(self, cmd: RemotingCommand, out: list[bytes | memoryview]) -> None:
        guard = self.dispatcher.guard if self.dispatcher else None
        if guard is not None:
            refusal = self._refused(guard, cmd)
            if refusal is not None:
                if not cmd.is_oneway:
                    self._append(out, cmd.response(ResponseCode.NO_PERMISSION, refusal))
                return
        handler = self.dispatcher.lookup(cmd.code) if self.dispatcher else None
        if handler is None:
            if not cmd.is_oneway:
                self._append(out, cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                               f" request type {cmd.code} not supported"))
            return
        try:
            res = handler(self, cmd)
        except Exception as e:  # noqa: BLE001 - contained to this request
            if not isinstance(e, HeaderError):
                log.warning("processor_error", code=cmd.code, error=repr(e))
            if not cmd.is_oneway:
                self._append(out, _error_response(cmd, e))
            return
        if type(res) is RemotingCommand:
            if not cmd.flag & FLAG_ONEWAY:
                self._append(out, res)
        elif isinstance(res, asyncio.Future):  # completed by a callback: no task needed
            self.inflight.add(res)
            res.add_done_callback(lambda f: self._future_done(cmd, f))
        elif res is not None:
            task = asyncio.ensure_future(self._finish(cmd, res))  # type: ignore[arg-type]
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)

    @staticmethod
    def _append(out: list[bytes | memoryview], resp: RemotingCommand) -> None:
        head, body = encode_parts(resp)
        out.append(head)
        if body:
            out.append(body)

    def _future_done(self, cmd: RemotingCommand, fut: asyncio.Future[RemotingCommand | None]) -> None:
        self.inflight.discard(fut)
        if fut.cancelled():
            return
        exc = fut.exception()
        resp = _error_response(cmd, exc) if exc is not None else fut.result()
        if resp is not None and not cmd.is_oneway:
            self.write(resp)

    async def _finish(self, cmd: RemotingCommand, aw: Awaitable[RemotingCommand | None]) -> None:
        try:
            resp = await aw
        except asyncio.CancelledError:
            return
        except Exception as e:  # noqa: BLE001
            if not isinstance(e, HeaderError):
                log.warning("processor_error", code=cmd.code, error=repr(e))
            resp = _error_response(cmd, e)
        if resp is not None and not cmd.is_oneway:
            self.write(resp)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._clock is not None:
            self._clock.close()
            self._clock = None
        self._drop_backlog()  # reads kept for later turns: nobody to answer any more
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(ConnectionClosed(f"connection to {self.remote_addr} closed"))
        self.pending.clear()
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        if not self.closed.done():
            self.closed.set_result(None)
        for cb in self._on_close:
            try:
                cb(self)
            except Exception as e:  # noqa: BLE001
                log.warning("on_close_callback_failed", error=repr(e))

    def pause_writing(self) -> None:
        self._paused = True
        if self._read_backpressure and self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self._read_backpressure:
            self._requeue()
            if self._may_read():
                self._resume_reading()
        waiters, self._drain_waiters = self._drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    # -- API ---------------------------------------------------------------------------------------------

    def hold_reading(self) -> None:
        """Flow control: stop reading requests until ``release_reading`` (what the peer sends meanwhile waits in
        its socket)."""
        if not self._read_held and self.transport is not None and not self.transport.is_closing():
            self._read_held = True
            self.transport.pause_reading()

    def release_reading(self) -> None:
        if self._read_held:
            self._read_held = False
            self._requeue()
            if self._may_read():
                self._resume_reading()

    def add_close_callback(self, cb: Callable[[Connection], None]) -> None:
        self._on_close.append(cb)

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing() and not self.closed.done()

    def write(self, cmd: RemotingCommand) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        head, body = encode_parts(cmd)
        if body:
            self.transport.writelines([head, body])
        else:
            self.transport.write(head)

    async def drain(self) -> None:
        if self._paused and self.is_open:
            fut = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(fut)
            await fut

    async def request(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a two-way request and wait for the response with the same opaque."""
        if not self.is_open:
            raise ConnectionClosed(f"connection to {self.remote_addr} is closed")
        cmd.opaque = next_opaque()
        cmd.flag &= ~FLAG_ONEWAY
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = fut
        assert self.transport is not None
        self.transport.write(encode(cmd))
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise RemotingTimeout(f"request code {cmd.code} to {self.remote_addr} timed out after {timeout}s") from None
        finally:
            self.pending.pop(cmd.opaque, None)

    def oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next_opaque()
        cmd.flag |= FLAG_ONEWAY
        self.write(cmd)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            if self._later:  # answers queued by write_soon go out first (the transport sends them before closing)
                self.flush_soon()
            self.transport.close()
