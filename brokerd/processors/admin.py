"""Broker admin: topics (17, 21, 23, 215, 351, 202), config (25, 26), runtime info (28),
subscription groups (200, 201, 207), TRIGGER_DELETE_FILES (27)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import orjson

from brokerd.config_file import ConfigError, parse_properties, to_properties
from brokerd.metadata.subscription import SubscriptionGroupConfig
from brokerd.metadata.topic import TopicConfig, validate_topic
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.results import PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

SYSTEM_TOPICS_NOT_UPDATABLE = frozenset({"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "TBW102"})
# RocketMQ's configBlackList ("configBlackList;brokerConfigPath") plus every key that would move data or escape
# the store (paths), point the broker at other brokers' or services' ports, or weaken the ACL
CONFIG_BLACKLIST = frozenset({
    "configBlackList", "brokerConfigPath", "brokerConfigPaths", "storePathRootDir", "storePathCommitLog",
    "storePathConsumeQueue", "storePathIndex", "storeCheckpoint", "abortFile", "brokerName", "brokerClusterName",
    "brokerId", "listenPort", "fastListenPortEnable", "haListenPort", "haListenHost", "haMasterAddress",
    "brokerIP1", "brokerIP2", "namesrvAddr", "controllerAddr", "enableControllerMode", "aclEnable", "aclFilePath",
    "aclAccessKey", "aclSecretKey",
})
SECRET_KEYS = frozenset({"aclSecretKey"})  # shown masked by GET_BROKER_CONFIG


class AdminProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, object]:
        return {17: self.create_topic, 21: self.all_topic_config, 23: self.topic_names, 215: self.delete_topic,
                351: self.get_topic_config, 202: self.topic_stats, 25: self.update_config, 26: self.get_config,
                28: self.runtime_info, 200: self.update_group, 201: self.all_groups, 207: self.delete_group,
                27: self.trigger_delete_files}

    def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        topic = cmd.str_field("topic")
        problem = validate_topic(topic)
        if problem:
            return cmd.response(ResponseCode.INVALID_PARAMETER, problem)
        if topic in SYSTEM_TOPICS_NOT_UPDATABLE or topic == self.broker.cfg.broker_cluster_name:
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
        rq, wq = cmd.int_field("readQueueNums", 16), cmd.int_field("writeQueueNums", 16)
        if not (0 < rq <= 1024 and 0 < wq <= 1024):
            return cmd.response(ResponseCode.INVALID_PARAMETER, "readQueueNums/writeQueueNums must be in 1..1024")
        tc = TopicConfig(topic_name=topic, read_queue_nums=rq, write_queue_nums=wq, perm=cmd.int_field("perm", 6),
                         topic_filter_type=cmd.ext.get("topicFilterType") or "SINGLE_TAG",
                         topic_sys_flag=cmd.int_field("topicSysFlag", 0), order=cmd.bool_field("order"))
        self.broker.meta.topics.update(tc)
        return self._once_replicated(cmd)

    def all_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        wrapper = self.broker.meta.topics.register_wrapper()
        return cmd.response(ext={"totalTopicNum": str(len(wrapper["topicConfigTable"]))}, body=orjson.dumps(wrapper))

    def topic_names(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=orjson.dumps({"topicList": sorted(self.broker.meta.topics.all())}))

    def get_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.str_field("topic")
        tc = self.broker.meta.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        return cmd.response(body=orjson.dumps({"topicConfig": tc.to_json()}))

    def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        topic = cmd.str_field("topic")
        if topic in SYSTEM_TOPICS_NOT_UPDATABLE:
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
        self.broker.meta.topics.delete(topic)
        self.broker.meta.offsets.remove_topic(topic)
        self.broker.store.delete_topic(topic)
        return self._once_replicated(cmd)

    def topic_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.str_field("topic")
        tc = self.broker.meta.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        st, name = self.broker.store, self.broker.cfg.broker_name
        table = []
        for q in range(tc.write_queue_nums):
            mx = st.max_offset_in_queue(topic, q)
            last = st.message_store_timestamp(topic, q, mx - 1) if mx > 0 else 0
            table.append([{"brokerName": name, "queueId": q, "topic": topic},
                          {"minOffset": st.min_offset_in_queue(topic, q), "maxOffset": mx, "lastUpdateTimestamp": last}])
        # TopicStatsTable is keyed by MessageQueue objects in Java; we send it as a list of [mq, stats] pairs
        # under "offsetTable" entries keyed by a JSON rendering, which fastjson clients read leniently.
        body = {"offsetTable": {orjson.dumps(mq).decode(): s for mq, s in table}}
        return cmd.response(body=orjson.dumps(body))

    def get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        props = self.broker.config_properties()
        text = to_properties({k: ("***" if k in SECRET_KEYS and v else v) for k, v in props.items()})
        return cmd.response(ext={"version": orjson.dumps(self.broker.config_version.to_json()).decode()},
                            body=text.encode())

    def update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        props = parse_properties((cmd.body or b"").decode("utf-8", "replace"))
        if not props:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "string2Properties error: empty body")
        bad = sorted(set(props) & CONFIG_BLACKLIST)
        if bad:
            return cmd.response(ResponseCode.NO_PERMISSION, f"Can not update config in black list: {bad[0]}")
        try:
            self.broker.update_config(props)
        except ConfigError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        return cmd.response()

    def runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        table = {k: str(v) for k, v in self.broker.runtime_info().items()}
        return cmd.response(body=orjson.dumps({"table": table}))

    def update_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        d = cmd.json_body()
        if not d.get("groupName"):
            return cmd.response(ResponseCode.INVALID_PARAMETER, "groupName is required")
        self.broker.meta.subscriptions.update(SubscriptionGroupConfig.from_json(d))
        return self._once_replicated(cmd)

    def all_groups(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        subs = self.broker.meta.subscriptions
        body = {"subscriptionGroupTable": {k: v.to_json() for k, v in subs.all().items()},
                "dataVersion": subs.data_version.to_json()}
        return cmd.response(body=orjson.dumps(body))

    def delete_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        group = cmd.str_field("groupName")
        self.broker.meta.subscriptions.delete(group)
        if cmd.bool_field("cleanOffset"):
            self.broker.meta.offsets.remove_offset(group)
        return self._once_replicated(cmd)

    def _once_replicated(self, cmd: RemotingCommand) -> RemotingCommand | asyncio.Future[RemotingCommand]:
        """With incremental metadata sync, a topic/group change is answered once its change record is held
        where the broker's sends are (the same put acknowledgement), so a failover cannot lose what was
        acknowledged; a record not replicated in time answers SYSTEM_ERROR (the change stays on this master)."""
        journal = self.broker.meta.hub.journal
        if journal is None:
            return cmd.response()
        out: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        now = self.broker.acks.when_acked(journal.last_end, lambda st: out.set_result(self._ack_answer(cmd, st)))
        return out if now is None else self._ack_answer(cmd, now)

    @staticmethod
    def _ack_answer(cmd: RemotingCommand, status: PutStatus) -> RemotingCommand:
        if status is PutStatus.PUT_OK:
            return cmd.response()
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"metadata change not replicated: {status.name}")

    def trigger_delete_files(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        removed = self.broker.store.clean_expired_files(force=True)
        return cmd.response(remark=f"removed {removed} files")
