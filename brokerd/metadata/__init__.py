"""Broker metadata: topic configs, subscription groups, consumer and delay offsets, message request modes, and the
change hook.

The managers share one generic base (`manager.py`: `ConfigManager`, which owns load / persist /
DataVersion / JSON encode-decode); every mutation of any table passes its `_commit` and is emitted through
one `MetadataHub` per broker (see `hook.py`), which is where the name-server re-registration and the
master -> slave delta replication attach. `BrokerMetadata` bundles the hub and the managers and implements
snapshot / replay for slaves.
"""

from .broker_metadata import SNAPSHOT_FORMAT, BrokerMetadata, MetadataSyncGap
from .hook import (
    KIND_CONSUMER_OFFSET,
    KIND_DELAY_OFFSET,
    KIND_MESSAGE_REQUEST_MODE,
    KIND_SUBSCRIPTION_GROUP,
    KIND_TOPIC,
    KINDS,
    OP_DELETE,
    OP_PUT,
    OPS,
    MetadataChange,
    MetadataHub,
    MetadataObserver,
    NoopObserver,
    RecordingObserver,
)
from .names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_SCHEDULE_TOPIC,
    TOPIC_NAME_REGEX,
    dlq_topic,
    is_inherited,
    is_not_allowed_send_topic,
    is_readable,
    is_retry_or_dlq_topic,
    is_system_topic,
    is_writeable,
    retry_topic,
    validate_group,
    validate_topic,
)
from .offsets import ConsumerOffsetManager, DelayOffsetManager
from .persist import MetadataLoadError, PersistJob, atomic_write
from .request_mode import MessageRequestMode, MessageRequestModeManager
from .subscription import SubscriptionGroupConfig, SubscriptionGroupManager
from .topic import TOPIC_FILTER_TYPES, TopicConfig, TopicConfigManager
from .version import DataVersion

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC", "DLQ_GROUP_TOPIC_PREFIX", "KINDS", "KIND_CONSUMER_OFFSET", "KIND_DELAY_OFFSET",
    "KIND_MESSAGE_REQUEST_MODE", "KIND_SUBSCRIPTION_GROUP", "KIND_TOPIC", "OPS", "OP_DELETE", "OP_PUT", "PERM_INHERIT", "PERM_PRIORITY",
    "PERM_READ", "PERM_WRITE", "RETRY_GROUP_TOPIC_PREFIX", "RMQ_SYS_SCHEDULE_TOPIC", "SNAPSHOT_FORMAT",
    "TOPIC_FILTER_TYPES", "TOPIC_NAME_REGEX", "BrokerMetadata", "ConsumerOffsetManager", "DataVersion",
    "DelayOffsetManager", "MetadataChange", "MetadataHub", "MetadataLoadError", "MetadataObserver",
    "MessageRequestMode", "MessageRequestModeManager", "MetadataSyncGap", "NoopObserver", "PersistJob", "RecordingObserver", "SubscriptionGroupConfig",
    "SubscriptionGroupManager", "TopicConfig", "TopicConfigManager", "atomic_write", "dlq_topic", "is_inherited",
    "is_not_allowed_send_topic", "is_readable", "is_retry_or_dlq_topic", "is_system_topic", "is_writeable",
    "retry_topic", "validate_group", "validate_topic",
]
