"""Subscription groups (`subscriptionGroup.json`) and the SubscriptionGroupManager.

Serves: HEART_BEAT (34) group auto-create (spec §2.3: defaults retryQueueNums=1, retryMaxTimes=16,
brokerId=0, whichBrokerWhenConsumeSlowly=1, notifyConsumerIdsChangedEnable=true), PULL_MESSAGE (11) group
lookup (26 when missing and not auto-created), CONSUMER_SEND_MSG_BACK (36) retry settings, admin
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP / DELETE_SUBSCRIPTIONGROUP / GET_ALL_SUBSCRIPTIONGROUP_CONFIG.

Every mutation passes `ConfigManager._commit` (manager.py): it bumps the DataVersion, emits exactly one
`subscription_group` change and persists.
Configs are frozen and `all()` is read-only. Not thread-safe: event loop thread only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import structlog

from .hook import KIND_SUBSCRIPTION_GROUP, MetadataHub
from .jsonfields import get_bool, get_int, get_str, get_str_map
from .manager import NamedConfigManager, TableFormat
from .names import SYSTEM_GROUPS, is_sys_consumer_group, validate_group

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


class SubscriptionGroupManager(NamedConfigManager[SubscriptionGroupConfig]):
    """The broker's subscription-group table. Single writer; every mutation emits one change.

    Generic parts (load / persist / DataVersion / snapshot state / `update` / `delete` / `all`) come from
    `NamedConfigManager`; every mutation passes its `_commit`."""

    FORMAT = TableFormat(KIND_SUBSCRIPTION_GROUP, SUBSCRIPTION_GROUP_FILE,
                         table_field="subscriptionGroupTable", context="subscriptionGroup")
    LOG_KEY = "group"
    LOADED_EVENT = "subscription_groups_loaded"

    def __init__(self, config_dir: str, hub: MetadataHub, auto_create_subscription_group: bool = True, *,
                 persist_on_change: bool = True) -> None:
        self._auto_create = auto_create_subscription_group
        super().__init__(config_dir, hub, structlog.get_logger().bind(component="subscription_group"),
                         persist_on_change=persist_on_change)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        return self._table.get(group)

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
        self._put(cfg, "subscription_group_auto_created")
        return cfg

    # ----- NamedConfigManager hooks -----

    def _initial_table(self) -> dict[str, SubscriptionGroupConfig]:
        return {name: SubscriptionGroupConfig(name) for name in SYSTEM_GROUPS}

    def _parse(self, raw: Any, default_name: str) -> SubscriptionGroupConfig:
        return SubscriptionGroupConfig.from_json(raw, default_name=default_name)

    def _log_fields(self, cfg: SubscriptionGroupConfig) -> dict[str, Any]:
        return {"group": cfg.group_name, "retry_queue_nums": cfg.retry_queue_nums,
                "retry_max_times": cfg.retry_max_times}

    def _name_of(self, cfg: SubscriptionGroupConfig) -> str:
        return cfg.group_name

    def _renamed(self, cfg: SubscriptionGroupConfig, name: str) -> SubscriptionGroupConfig:
        return dataclasses.replace(cfg, group_name=name)
