"""Disk quota for brokers sharing a disk partition (RIP-31): each gets partition size / replicasPerDiskPartition.

Over `logicalDiskSpaceCleanForciblyThreshold` of its quota a broker's oldest segments are cleaned first, whatever
`fileReservedTime` says; over `diskSpaceWarningLevelRatio` of its quota (or of the partition) it refuses writes
(SERVICE_NOT_AVAILABLE) instead of filling the disk. Logical usage = commit log + consume queues + index.
A configured `diskPartitionSizeBytes` replaces the real partition size and then the partition's used space is the
sum of its brokers' logical usage (how tests simulate a small disk without filling one)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import structlog

from brokerd.store.flags import LOGIC_DISK_FULL
from container.config import ContainerConfig
from container.context import BrokerDirectory, HostedBroker

log = structlog.get_logger("container.quota")


class DiskQuota:
    def __init__(self, container: BrokerDirectory, cfg: ContainerConfig) -> None:
        self.container = container
        self.cfg = cfg

    def _device(self, b: HostedBroker) -> int:
        try:
            return os.stat(b.cfg.store_path_root_dir).st_dev
        except OSError:
            return -1

    def _members(self, dev: int) -> list[HostedBroker]:
        return [s.broker for s in self.container.brokers.values() if self._device(s.broker) == dev]

    def partition(self, b: HostedBroker) -> tuple[int, int]:
        """(size, used) of the broker's partition."""
        if self.cfg.disk_partition_size_bytes > 0:
            used = sum(m.store.logical_usage_bytes() for m in self._members(self._device(b)))
            return self.cfg.disk_partition_size_bytes, used
        u = shutil.disk_usage(b.cfg.store_path_root_dir)
        return u.total, u.total - u.free

    def quota_bytes(self, b: HostedBroker) -> int:
        size, _ = self.partition(b)
        return size // self.cfg.replicas_per_disk_partition

    def checker(self, b: HostedBroker) -> Callable[[int], bool]:
        def over_quota(logical: int) -> bool:
            size, used = self.partition(b)
            quota = size // self.cfg.replicas_per_disk_partition
            flags = b.store.running_flags
            warn = logical > b.cfg.disk_space_warning_level_ratio * quota or (
                self.cfg.disk_partition_size_bytes > 0 and used > b.cfg.disk_space_warning_level_ratio * size)
            if warn and not flags.has(LOGIC_DISK_FULL):
                flags.set(LOGIC_DISK_FULL)
                log.error("broker_over_disk_warning_level", broker=b.cfg.identity, logical=logical, quota=quota)
            elif not warn and flags.has(LOGIC_DISK_FULL):
                flags.clear(LOGIC_DISK_FULL)
                log.info("broker_disk_usage_ok", broker=b.cfg.identity, logical=logical, quota=quota)
            forced = self.cfg.replicas_per_disk_partition > 1 and (
                logical > self.cfg.logical_disk_space_clean_forcibly_threshold * quota)
            if self.cfg.disk_partition_size_bytes > 0 and used > b.cfg.disk_space_clean_forcibly_ratio * size:
                forced = True
            return forced
        return over_quota

    def install(self, b: HostedBroker) -> None:
        b.store.set_quota_checker(self.checker(b))
