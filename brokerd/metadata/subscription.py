"""Subscription groups (`subscriptionGroup.json`) and the SubscriptionGroupManager.

Serves: HEART_BEAT (34) group auto-create (spec §2.3: defaults retryQueueNums=1, retryMaxTimes=16,
brokerId=0, whichBrokerWhenConsumeSlowly=1, notifyConsumerIdsChangedEnable=true), PULL_MESSAGE (11) group
lookup (26 when missing and not auto-created), CONSUMER_SEND_MSG_BACK (36) retry settings, admin
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP / DELETE_SUBSCRIPTIONGROUP / GET_ALL_SUBSCRIPTIONGROUP_CONFIG.

Every mutation bumps the DataVersion, emits exactly one `subscription_group` change and persists.
Configs are frozen and `all()` is read-only. Not thread-safe: event loop thread only.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import structlog

from .hook import KIND_SUBSCRIPTION_GROUP, OP_DELETE, OP_PUT, MetadataChange, MetadataHub
from .jsonfields import get_bool, get_int, get_object, get_str, get_str_map
from .names import SYSTEM_GROUPS, is_sys_consumer_group, validate_group
from .persist import ConfigFile, PersistJob
from .version import DataVersion

SUBSCRIPTION_GROUP_FILE: Final = "subscriptionGroup.json"


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """One consumer group's broker-side settings. Frozen: use `dataclasses.replace` + `update()`."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    attributes: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", MappingProxyType(dict(self.attributes)))

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "attributes")
                    + (tuple(sorted(self.attributes.items())),))

    def to_json(self) -> dict[str, Any]:
        return {
            "groupName": self.group_name,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeMessageOrderly": self.consume_message_orderly,
            "retryQueueNums": self.retry_queue_nums,
            "retryMaxTimes": self.retry_max_times,
            "brokerId": self.broker_id,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "groupSysFlag": self.group_sys_flag,
            "consumeTimeoutMinute": self.consume_timeout_minute,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], *, default_name: str = "") -> SubscriptionGroupConfig:
        """Parse RocketMQ's camelCase JSON; missing keys take the Java defaults, unknown keys are ignored."""
        if not isinstance(d, dict):
            raise ValueError(f"subscription group: expected an object, got {type(d).__name__}")
        name = get_str(d, "groupName", default_name, "subscriptionGroup")
        ctx = f"subscriptionGroup[{name}]"
        return cls(
            group_name=name,
            consume_enable=get_bool(d, "consumeEnable", True, ctx),
            consume_from_min_enable=get_bool(d, "consumeFromMinEnable", True, ctx),
            consume_broadcast_enable=get_bool(d, "consumeBroadcastEnable", True, ctx),
            retry_queue_nums=get_int(d, "retryQueueNums", 1, ctx),
            retry_max_times=get_int(d, "retryMaxTimes", 16, ctx),
            broker_id=get_int(d, "brokerId", 0, ctx),
            which_broker_when_consume_slowly=get_int(d, "whichBrokerWhenConsumeSlowly", 1, ctx),
            notify_consumer_ids_changed_enable=get_bool(d, "notifyConsumerIdsChangedEnable", True, ctx),
            consume_message_orderly=get_bool(d, "consumeMessageOrderly", False, ctx),
            group_sys_flag=get_int(d, "groupSysFlag", 0, ctx),
            consume_timeout_minute=get_int(d, "consumeTimeoutMinute", 15, ctx),
            attributes=get_str_map(d, "attributes", ctx),
        )

    def validate(self) -> None:
        err = validate_group(self.group_name)
        if err is not None:
            raise ValueError(f"groupName: {err}")
        if not 0 <= self.retry_queue_nums <= 65535:
            raise ValueError(f"retryQueueNums: must be between 0 and 65535, got {self.retry_queue_nums}")
        if self.broker_id < 0:
            raise ValueError(f"brokerId: must be >= 0, got {self.broker_id}")
        if self.which_broker_when_consume_slowly < 0:
            raise ValueError(f"whichBrokerWhenConsumeSlowly: must be >= 0, got {self.which_broker_when_consume_slowly}")


class SubscriptionGroupManager:
    """The broker's subscription-group table. Single writer; every mutation emits one change."""

    def __init__(self, config_dir: str, hub: MetadataHub, auto_create_subscription_group: bool = True, *,
                 persist_on_change: bool = True) -> None:
        self._hub = hub
        self._auto_create = auto_create_subscription_group
        self._persist_on_change = persist_on_change
        self._table: dict[str, SubscriptionGroupConfig] = {}
        self._view: Mapping[str, SubscriptionGroupConfig] = MappingProxyType(self._table)
        self._dv = DataVersion(timestamp=hub.now_ms())
        self._file = ConfigFile(os.path.join(config_dir, SUBSCRIPTION_GROUP_FILE), self.export_state)
        self._log = structlog.get_logger().bind(component="subscription_group")
        self._reset_to_system_groups()

    # ----- reads -----

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        return self._table.get(group)

    def __contains__(self, group: object) -> bool:
        return group in self._table

    def all(self) -> Mapping[str, SubscriptionGroupConfig]:
        return self._view

    @property
    def data_version(self) -> DataVersion:
        return self._dv.copy()

    @property
    def path(self) -> str:
        return self._file.path

    # ----- load / persist / replication state -----

    def load(self) -> None:
        state = self._file.load(_decode_state)
        self._reset_to_system_groups()
        if state is not None:
            table, dv = state
            self._table.update(table)
            self._dv = dv
        self._log.info("subscription_groups_loaded", path=self._file.path, groups=len(self._table),
                       from_file=state is not None)

    def persist(self, *, force: bool = False) -> bool:
        return self._file.persist(force=force)

    def prepare_persist(self, *, force: bool = False) -> PersistJob | None:
        return self._file.prepare(force=force)

    @property
    def dirty(self) -> bool:
        return self._file.dirty

    def export_state(self) -> dict[str, Any]:
        return {
            "dataVersion": self._dv.to_json(),
            "subscriptionGroupTable": {name: cfg.to_json() for name, cfg in self._table.items()},
        }

    def import_state(self, doc: dict[str, Any]) -> None:
        table, dv = _decode_state(doc)
        self._table.clear()
        self._table.update(table)
        self._dv = dv
        self._file.mark_dirty()

    def apply_replicated(self, change: MetadataChange) -> None:
        dv = DataVersion.from_json(change.data_version)
        if change.op == OP_PUT:
            if not isinstance(change.value, dict):
                raise ValueError(f"subscription group change {change.seq}: value must be an object")
            self._table[change.key] = SubscriptionGroupConfig.from_json(change.value, default_name=change.key)
        else:
            self._table.pop(change.key, None)
        self._dv = dv
        self._after_change()

    # ----- mutations -----

    def find_or_create(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with the defaults when missing and auto-create is on (always for
        `CID_RMQ_SYS_*` groups). None when missing and not creatable (PULL answers 26) or the name is bad."""
        cfg = self._table.get(group)
        if cfg is not None:
            return cfg
        if not (self._auto_create or is_sys_consumer_group(group)) or validate_group(group) is not None:
            return None
        cfg = SubscriptionGroupConfig(group)
        self._commit_put(cfg, "subscription_group_auto_created")
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        """Create or replace a group (admin). Raises ValueError for a bad config."""
        cfg.validate()
        created = cfg.group_name not in self._table
        self._commit_put(cfg, "subscription_group_created" if created else "subscription_group_updated")

    def delete(self, group: str) -> bool:
        if group not in self._table:
            return False
        del self._table[group]
        self._bump()
        self._hub.emit(KIND_SUBSCRIPTION_GROUP, OP_DELETE, group, None, self._dv.to_json())
        self._after_change()
        self._log.info("subscription_group_deleted", group=group)
        return True

    # ----- internals -----

    def _bump(self) -> None:
        self._dv.next_version(self._hub.state_version, now_ms=self._hub.now_ms())

    def _after_change(self) -> None:
        self._file.mark_dirty()
        if self._persist_on_change:
            self._file.persist_logged()

    def _commit_put(self, cfg: SubscriptionGroupConfig, event: str) -> None:
        self._table[cfg.group_name] = cfg
        self._bump()
        self._hub.emit(KIND_SUBSCRIPTION_GROUP, OP_PUT, cfg.group_name, cfg.to_json(), self._dv.to_json())
        self._after_change()
        self._log.info(event, group=cfg.group_name, retry_queue_nums=cfg.retry_queue_nums,
                       retry_max_times=cfg.retry_max_times)

    def _reset_to_system_groups(self) -> None:
        self._table.clear()
        for name in SYSTEM_GROUPS:
            self._table[name] = SubscriptionGroupConfig(name)


def _decode_state(doc: Any) -> tuple[dict[str, SubscriptionGroupConfig], DataVersion]:
    if not isinstance(doc, dict):
        raise ValueError("subscriptionGroup: expected an object")
    table: dict[str, SubscriptionGroupConfig] = {}
    for name, raw in get_object(doc, "subscriptionGroupTable", "subscriptionGroup").items():
        cfg = SubscriptionGroupConfig.from_json(raw, default_name=name)
        if cfg.group_name != name:
            cfg = dataclasses.replace(cfg, group_name=name)
        table[name] = cfg
    return table, DataVersion.from_json(doc.get("dataVersion"))
