"""Topic admin requests (RocketMQ's AdminBrokerProcessor): UPDATE_AND_CREATE_TOPIC (17), UPDATE_AND_CREATE_TOPIC_LIST
(18), GET_ALL_TOPIC_CONFIG (21), GET_TOPIC_NAME_LIST (23), DELETE_TOPIC_IN_BROKER (215), GET_TOPIC_CONFIG (351),
GET_TOPIC_STATS_INFO (202), GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305), CLEAN_UNUSED_TOPIC (316)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from brokerd.metadata.names import STATIC_SYSTEM_TOPICS, retry_topic, validate_topic
from brokerd.metadata.topic import TopicConfig
from brokerd.processors.admin_common import AnswerOrFuture, dumps, mq_json, mq_map, once_replicated, reads
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler, HandlerResult

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

MAX_QUEUE_NUMS: Final = 1024
# the topic attributes RocketMQ 5 knows (TopicAttributes) and the values each takes
TOPIC_ATTRIBUTES: Final[Mapping[str, frozenset[str]]] = {
    "message.type": frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"}),
    "queue.type": frozenset({"BatchCQ", "SimpleCQ"}),
    "cleanup.policy": frozenset({"DELETE", "COMPACTION"}),
}


class AttributeError_(ValueError):
    """An attribute alteration RocketMQ's AttributeUtil refuses."""


def alter_attributes(current: Mapping[str, str], spec: str | None, *, create: bool) -> dict[str, str]:
    """RocketMQ's `AttributeParser.parseToMap` + `AttributeUtil.alterCurrentAttributes`: ``+key=value`` sets,
    ``-key`` removes (not when creating); unknown keys and values are refused naming them."""
    out = dict(current)
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        sign, rest = item[0], item[1:]
        key, eq, value = rest.partition("=")
        if sign not in "+-" or not key:
            raise AttributeError_(f"attribute format is wrong: {item!r} (+key=value or -key)")
        allowed = TOPIC_ATTRIBUTES.get(key)
        if allowed is None:
            raise AttributeError_(f"unsupported key: {key}")
        if sign == "-":
            if create:
                raise AttributeError_(f"only add attribute is supported while creating topic. key: {key}")
            if key not in out:
                raise AttributeError_(f"attempt to delete a nonexistent key: {key}")
            del out[key]
            continue
        if not eq or value not in allowed:
            raise AttributeError_(f"value is not in set: {value!r} for key {key} (one of {sorted(allowed)})")
        out[key] = value
    return out


class TopicAdmin:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        c = RequestCode
        return {c.UPDATE_AND_CREATE_TOPIC: self.create_topic, c.UPDATE_AND_CREATE_TOPIC_LIST: self.create_topics,
                c.GET_ALL_TOPIC_CONFIG: self.all_topic_config, c.GET_TOPIC_NAME_LIST: self.topic_names,
                c.DELETE_TOPIC_IN_BROKER: self.delete_topic, c.GET_TOPIC_CONFIG: self.get_topic_config,
                c.GET_TOPIC_STATS_INFO: self.topic_stats, c.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.system_topics,
                c.CLEAN_UNUSED_TOPIC: self.clean_unused_topic}

    # -- create ---------------------------------------------------------------------------------------------

    def _refusal(self, topic: str) -> str | None:
        """TopicValidator.validateTopic, then the system-topic check (validateSystemTopicWhenUpdateTopic)."""
        problem = validate_topic(topic)
        if problem:
            return problem
        if self.broker.meta.topics.is_system_topic(topic) or topic == self.broker.cfg.broker_cluster_name:
            return f"The topic[{topic}] is conflict with system topic."
        return None

    def _topic_from_header(self, cmd: RemotingCommand) -> TopicConfig | str:
        topic = cmd.ext.get("topic", "")
        refusal = self._refusal(topic)
        if refusal:
            return refusal
        rq, wq = cmd.int_field("readQueueNums", 16), cmd.int_field("writeQueueNums", 16)
        if not (0 < rq <= MAX_QUEUE_NUMS and 0 < wq <= MAX_QUEUE_NUMS):
            return f"readQueueNums/writeQueueNums must be in 1..{MAX_QUEUE_NUMS}, got {rq}/{wq}"
        old = self.broker.meta.topics.get(topic)
        try:
            attrs = alter_attributes(old.attributes if old else {}, cmd.ext.get("attributes"), create=old is None)
        except AttributeError_ as e:
            return str(e)
        tc = TopicConfig(topic_name=topic, read_queue_nums=rq, write_queue_nums=wq, perm=cmd.int_field("perm", 6),
                         topic_filter_type=cmd.ext.get("topicFilterType") or "SINGLE_TAG",
                         topic_sys_flag=cmd.int_field("topicSysFlag", 0), order=cmd.bool_field("order"),
                         attributes=attrs)  # fmt: skip
        try:
            tc.validate()
        except ValueError as e:
            return str(e)
        return tc

    def create_topic(self, conn: Connection, cmd: RemotingCommand) -> AnswerOrFuture:
        tc = self._topic_from_header(cmd)
        if isinstance(tc, str):
            return cmd.response(ResponseCode.SYSTEM_ERROR, tc)
        if self.broker.meta.topics.get(tc.topic_name) == tc:  # no change: idempotent, nothing registered
            return cmd.response()
        self.broker.log.info("topic_updated_by_admin", topic=tc.topic_name, read_queue_nums=tc.read_queue_nums,
                             write_queue_nums=tc.write_queue_nums, perm=tc.perm, remote=conn.remote_addr[0])
        self.broker.meta.topics.update(tc)
        return once_replicated(self.broker, cmd)

    def create_topics(self, conn: Connection, cmd: RemotingCommand) -> AnswerOrFuture:
        """Body `CreateTopicListRequestBody` {"topicConfigList": [TopicConfig, ...]}: all checked before any is
        stored."""
        raw = cmd.json_body().get("topicConfigList")
        if not isinstance(raw, list) or not raw:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "topicConfigList is empty")
        configs = []
        for item in raw:
            try:
                tc = TopicConfig.from_json(item)
                refusal = self._refusal(tc.topic_name)
                tc = dataclasses.replace(tc, attributes=alter_attributes({}, _attr_spec(tc.attributes), create=True))
                tc.validate()
            except (ValueError, TypeError) as e:
                return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
            if refusal:
                return cmd.response(ResponseCode.SYSTEM_ERROR, refusal)
            configs.append(tc)
        for tc in configs:
            self.broker.meta.topics.update(tc)
        return once_replicated(self.broker, cmd)

    # -- read -------------------------------------------------------------------------------------------------

    def all_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """TopicConfigAndMappingSerializeWrapper (no static topics here: empty mapping tables)."""
        wrapper: dict[str, Any] = self.broker.meta.topics.register_wrapper()
        wrapper["topicQueueMappingInfoMap"] = {}
        wrapper["topicQueueMappingDetailMap"] = {}
        wrapper["mappingDataVersion"] = wrapper["dataVersion"]
        return cmd.response(ext={"totalTopicNum": str(len(wrapper["topicConfigTable"]))}, body=dumps(wrapper))

    def topic_names(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=dumps({"topicList": sorted(self.broker.meta.topics.all()),
                                        "brokerAddr": self.broker.cfg.broker_addr}))

    def get_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """TopicConfigAndQueueMapping: the topic's config fields (no `mappingDetail`: no static topics)."""
        topic = cmd.str_field("topic")
        tc = self.broker.meta.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        return cmd.response(body=dumps(tc.to_json()))

    def topic_stats(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """TopicStatsTable: min/max offset and the last store time of every queue (max of read and write)."""
        topic = cmd.str_field("topic")
        tc = self.broker.meta.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        st, name = self.broker.store, self.broker.cfg.broker_name

        def build() -> RemotingCommand:
            entries = []
            for q in range(max(tc.write_queue_nums, tc.read_queue_nums)):
                mn, mx = max(0, st.min_offset_in_queue(topic, q)), max(0, st.max_offset_in_queue(topic, q))
                last = st.message_store_timestamp(topic, q, mx - 1) if mx > 0 else 0
                entries.append((mq_json(topic, name, q),
                                {"lastUpdateTimestamp": max(0, last), "maxOffset": mx, "minOffset": mn}))
            return cmd.response(body=dumps({"offsetTable": mq_map(entries)}))

        return reads(st, build)

    def system_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topics = self.broker.meta.topics
        names = set(STATIC_SYSTEM_TOPICS) | {t for t in topics.all() if topics.is_system_topic(t)}
        return cmd.response(body=dumps({"topicList": sorted(names)}))

    # -- delete -----------------------------------------------------------------------------------------------

    def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> AnswerOrFuture:
        """The topic's config, consumer offsets, queues and statistics; its groups' POP retry topics too. Deleting
        a topic this broker does not have succeeds (a cluster-wide delete reaches every broker)."""
        topic = cmd.ext.get("topic", "")
        if not topic.strip():
            return cmd.response(ResponseCode.SYSTEM_ERROR, "The specified topic is blank.")
        if self.broker.meta.topics.is_system_topic(topic):
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        meta = self.broker.meta
        for group in sorted(meta.offsets.groups_of_topic(topic)):
            for pop_retry in (f"{retry_topic(group)}_{topic}", f"{retry_topic(group)}+{topic}"):
                if meta.topics.get(pop_retry) is not None:
                    self._delete(pop_retry)
        existed = self._delete(topic)
        self.broker.log.info("topic_deleted_by_admin", topic=topic, existed=existed, remote=conn.remote_addr[0])
        return once_replicated(self.broker, cmd)

    def _delete(self, topic: str) -> bool:
        existed = self.broker.meta.topics.delete(topic)
        self.broker.meta.offsets.remove_topic(topic)
        self.broker.store.delete_topic(topic)
        self.broker.stats_manager.on_topic_deleted(topic)
        return existed

    def clean_unused_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """DefaultMessageStore.cleanUnusedTopic: the consume queues of topics no longer in the topic table go
        (system topics stay)."""
        known = self.broker.meta.topics
        removed = [t for t in self.broker.store.topics() if t not in known and not known.is_system_topic(t)]
        for topic in removed:
            self.broker.store.delete_topic(topic)
        self.broker.log.info("unused_topics_cleaned", topics=removed, remote=conn.remote_addr[0])
        return cmd.response()


def _attr_spec(attrs: Mapping[str, str]) -> str:
    """A TopicConfig body's attributes ({"+message.type": "FIFO"} as RocketMQ's tools send them, or plain keys)
    as an alteration spec."""
    return ",".join(f"{k if k[:1] in '+-' else '+' + k}={v}" for k, v in attrs.items())
