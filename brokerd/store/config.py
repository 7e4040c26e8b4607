"""Message store configuration (RocketMQ ``MessageStoreConfig`` names in snake_case)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from brokerd.message import parse_delay_levels

CQ_UNIT_SIZE: Final = 20
ASYNC_FLUSH: Final = "ASYNC_FLUSH"
SYNC_FLUSH: Final = "SYNC_FLUSH"


def _fail(key: str, reason: str) -> None:
    raise ValueError(f"{key}: {reason}")


@dataclass(frozen=True)
class StoreConfig:
    """Frozen store settings; ``__post_init__`` rejects bad values with ``ValueError("<key>: <reason>")``."""

    store_path_root_dir: str
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_UNIT_SIZE
    flush_disk_type: str = ASYNC_FLUSH
    flush_interval_commit_log_ms: int = 500
    flush_interval_consume_queue_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    file_reserved_time_hours: float = 72
    delete_when: str = "04"
    max_message_size: int = 4 * 1024 * 1024
    disk_space_warning_level_ratio: float = 0.90
    disk_space_clean_forcibly_ratio: float = 0.85
    clean_resource_interval_ms: int = 10_000
    delete_file_batch_max: int = 10
    message_index_enable: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 262_144
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    dispatch_behind_confirm: bool = False
    warm_mapped_file_enable: bool = False  # see BrokerConfig.warm_mapped_file_enable

    def __post_init__(self) -> None:
        if not isinstance(self.store_path_root_dir, str) or not self.store_path_root_dir:
            _fail("store_path_root_dir", "required, a non-empty path")
        if self.mapped_file_size_commit_log < 4096:
            _fail("mapped_file_size_commit_log", "must be at least 4096 bytes")
        cq = self.mapped_file_size_consume_queue
        if cq < CQ_UNIT_SIZE or cq % CQ_UNIT_SIZE:
            _fail("mapped_file_size_consume_queue", "must be a positive multiple of 20")
        if self.flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
            _fail("flush_disk_type", "must be ASYNC_FLUSH or SYNC_FLUSH")
        for key in ("flush_interval_commit_log_ms", "flush_interval_consume_queue_ms", "sync_flush_timeout_ms",
                    "clean_resource_interval_ms"):  # fmt: skip
            if getattr(self, key) <= 0:
                _fail(key, "must be > 0")
        if self.file_reserved_time_hours <= 0:
            _fail("file_reserved_time_hours", "must be > 0")
        self._check_delete_when()
        if self.delete_file_batch_max <= 0:
            _fail("delete_file_batch_max", "must be > 0")
        if self.max_message_size <= 0:
            _fail("max_message_size", "must be > 0")
        for key in ("disk_space_warning_level_ratio", "disk_space_clean_forcibly_ratio"):
            if not 0.0 < getattr(self, key) <= 1.0:
                _fail(key, "must be in (0, 1]")
        if self.max_hash_slot_num <= 0:
            _fail("max_hash_slot_num", "must be > 0")
        if self.max_index_num <= 0:
            _fail("max_index_num", "must be > 0")
        if self.max_transfer_count_on_message_in_memory <= 0:
            _fail("max_transfer_count_on_message_in_memory", "must be > 0")
        if self.max_transfer_bytes_on_message_in_memory <= 0:
            _fail("max_transfer_bytes_on_message_in_memory", "must be > 0")
        try:
            parse_delay_levels(self.message_delay_level)
        except ValueError as exc:
            _fail("message_delay_level", str(exc))

    def _check_delete_when(self) -> None:
        for part in self.delete_when.split(";"):
            if not part.strip().isdigit() or not 0 <= int(part) <= 23:
                _fail("delete_when", "must be hours 00..23 separated by ';'")

    @property
    def delete_hours(self) -> frozenset[int]:
        return frozenset(int(p) for p in self.delete_when.split(";"))

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == SYNC_FLUSH

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)
