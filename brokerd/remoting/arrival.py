"""When a request's bytes became readable on a server connection: the arrival clock.

RocketMQ counts a send's time in the broker from when it was queued for the send threads, and refuses one that
waited ``waitTimeMillsInSendQueue`` there (SYSTEM_BUSY). Here a send waits in its socket until the event loop
reads it (the loop is busy, the connection is paused, ...), so its time is counted from when its bytes became
readable on the broker's socket, not from when the loop read them. libuv does not say when bytes arrived (and
uvloop's ``loop.time()`` is libuv's millisecond clock), so the kernel's receive stamps are used: with
``SO_TIMESTAMPNS`` the kernel stamps every received TCP segment, and a one-byte ``MSG_PEEK`` ``recvmsg`` returns
the stamp of the first unread buffer of the receive queue.

The rule, per read of a connection (``ArrivalClock.before_read`` runs right before each read):

* the connection's previous read drained its socket (it did not fill the read buffer) and began less than
  ``EXACT_WITHIN`` ago: every byte this read returns arrived since, so its arrival is now (off by < 5 ms);
* otherwise (the connection was idle or paused, the loop was busy, or the previous read left bytes behind): the
  kernel's stamp of the first unread buffer. TCP merges segments that arrive while the queue is unread into one
  buffer and keeps the newest stamp, so this is when the newest bytes of that buffer arrived: a read's arrival
  is never earlier than its oldest bytes' (a wait is never overstated), and later by at most the time the
  client took to write one buffer's worth (up to 17 writes);
* every frame a read completes gets that read's arrival.

Where the kernel gives no stamp (no ``SO_TIMESTAMPNS``, a peek that fails) the arrival is when the read began.
The kernel turns stamping on asynchronously when the host's first socket asks for it (and off when the last one
closes): until then a buffer is stamped when it is read, which is the same fallback. So a server asks for stamps
on its listening socket when it starts (``stamp_listener``): stamping is on before its first connection arrives,
and every connection it accepts inherits the option.
"""

from __future__ import annotations

import os
import socket
import struct
import time

EXACT_WITHIN = 0.005  # a read begun this soon after one that drained the socket: its bytes arrived since
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if os.uname().sysname == "Linux" else None)
_SPACE = socket.CMSG_SPACE(16)  # struct timespec
_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT
_TIMESPEC = struct.Struct("qq")
_monotonic = time.monotonic
_realtime = time.time


def stamp_listener(fd: int) -> bool:
    """Ask for receive stamps on a listening socket (``fd``: not owned); False where the kernel has none."""
    if SO_TIMESTAMPNS is None:
        return False
    sock = socket.socket(fileno=os.dup(fd))
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        return True
    except OSError:
        return False
    finally:
        sock.close()


class ArrivalClock:
    """The arrival clock of one connected socket (``fd``: not owned; the clock keeps its own duplicate)."""

    def __init__(self, fd: int) -> None:
        self._sock: socket.socket | None = None
        self._last = float("-inf")  # when the previous read began
        self._full = True  # the previous read filled the buffer (bytes left behind); True: no read yet
        self.peeks = 0  # kernel stamps asked for (observability, tests)
        if SO_TIMESTAMPNS is None:
            return
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            sock.close()
            return
        self._sock = sock

    @property
    def stamped(self) -> bool:
        """The kernel stamps this socket's segments."""
        return self._sock is not None

    def before_read(self) -> float:
        """A read of the socket is about to happen: the arrival (``time.monotonic()`` scale) of what it returns."""
        now = _monotonic()
        last, self._last = self._last, now
        if self._sock is None or (not self._full and now - last < EXACT_WITHIN):
            return now
        return self.kernel_stamp(now)

    def after_read(self, filled: bool) -> None:
        """The read returned; ``filled``: it filled the buffer (the socket may hold more)."""
        self._full = filled

    def kernel_stamp(self, now: float) -> float:
        """The kernel's stamp of the first unread buffer, on the monotonic scale, or ``now`` without one."""
        sock = self._sock
        if sock is None:
            return now
        self.peeks += 1
        try:
            _data, anc, _flags, _addr = sock.recvmsg(1, _SPACE, _PEEK)
        except OSError:  # nothing to read (EAGAIN), reset, ...: the read finds out
            return now
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = _TIMESPEC.unpack_from(raw)
                arrived = _monotonic() - (_realtime() - (sec + nsec * 1e-9))
                return arrived if arrived < now else now
        return now

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
