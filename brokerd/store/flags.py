"""Store running flags (RocketMQ ``RunningFlags`` bits)."""

from __future__ import annotations

from typing import Final

NOT_READABLE: Final = 1
NOT_WRITEABLE: Final = 1 << 1
WRITE_LOGICS_QUEUE_ERROR: Final = 1 << 2
WRITE_INDEX_FILE_ERROR: Final = 1 << 3
DISK_FULL: Final = 1 << 4
LOGIC_DISK_FULL: Final = 1 << 5

_NAMES: Final = {
    NOT_READABLE: "NOT_READABLE",
    NOT_WRITEABLE: "NOT_WRITEABLE",
    WRITE_LOGICS_QUEUE_ERROR: "WRITE_LOGICS_QUEUE_ERROR",
    WRITE_INDEX_FILE_ERROR: "WRITE_INDEX_FILE_ERROR",
    DISK_FULL: "DISK_FULL",
    LOGIC_DISK_FULL: "LOGIC_DISK_FULL",
}
WRITE_BLOCKERS: Final = NOT_WRITEABLE | WRITE_LOGICS_QUEUE_ERROR | WRITE_INDEX_FILE_ERROR | DISK_FULL | LOGIC_DISK_FULL


class RunningFlags:
    """Bit set; the store is writeable only while none of the blocking bits is set."""

    __slots__ = ("bits",)

    def __init__(self) -> None:
        self.bits = 0

    def set(self, bit: int) -> None:
        self.bits |= bit

    def clear(self, bit: int) -> None:
        self.bits &= ~bit

    def has(self, bit: int) -> bool:
        return bool(self.bits & bit)

    @property
    def writeable(self) -> bool:
        return not self.bits & WRITE_BLOCKERS

    @property
    def readable(self) -> bool:
        return not self.bits & NOT_READABLE

    def names(self) -> list[str]:
        return [name for bit, name in _NAMES.items() if self.bits & bit]

    def __repr__(self) -> str:
        return f"RunningFlags({'|'.join(self.names()) or 'OK'})"
