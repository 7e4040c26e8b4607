"""CONSUMER_SEND_MSG_BACK (36): retry via %RETRY%group with reconsume delays, %DLQ%group after max retries."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from brokerd import message as m
from brokerd.message import MessageInner
from brokerd.metadata.names import dlq_topic, retry_topic
from brokerd.metadata.topic import PERM_WRITE
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.message_store import PutStatus

if TYPE_CHECKING:
    from brokerd.context import BrokerContext


class SendBackProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, object]:
        return {36: self.process}

    def process(self, conn: Connection, cmd: RemotingCommand) -> object:
        b = self.broker
        group = cmd.str_field("group")
        phys = cmd.int_field("offset")
        delay_level = cmd.int_field("delayLevel", 0)
        sg = b.meta.subscriptions.find_or_create(group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        if not b.is_writeable():
            return cmd.response(ResponseCode.NO_PERMISSION, f"the broker[{b.cfg.broker_ip1}] sending message is forbidden")
        if sg.retry_queue_nums <= 0:
            return cmd.response()
        retry = retry_topic(group)
        tc = b.meta.topics.create_topic_in_send_back_method(retry, sg.retry_queue_nums, 6, 0)
        if not tc.perm & PERM_WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{retry}] sending message is forbidden")
        raw = b.store.look_message_by_offset(phys)
        if raw is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {phys}")
        orig, _ = m.decode_record(raw)
        b.log.debug("send_back", group=group, offset=phys, topic=orig.topic, reconsume=orig.reconsume_times,
                    seq=orig.properties.get("seq"), delay_level=delay_level, max=cmd.ext.get("maxReconsumeTimes"))
        props = dict(orig.properties)
        props.setdefault(m.RETRY_TOPIC, orig.topic)
        props.pop(m.DELAY, None)
        mrt = cmd.ext.get("maxReconsumeTimes")
        max_times = int(mrt) if mrt and mrt.lstrip("-").isdigit() and cmd.version >= 121 else sg.retry_max_times
        reconsume = orig.reconsume_times
        topic, queue_id = retry, random.randrange(max(tc.write_queue_nums, 1))
        if reconsume >= max_times or delay_level < 0:
            topic, queue_id = dlq_topic(group), 0
            b.meta.topics.create_topic_in_send_back_method(topic, 1, 6, 0)
        else:
            level = delay_level if delay_level > 0 else 3 + reconsume
            props[m.DELAY] = str(level)
        origin_id = props.get(m.ORIGIN_MESSAGE_ID) or props.get(m.UNIQ_KEY) or orig.msg_id
        props[m.ORIGIN_MESSAGE_ID] = origin_id
        msg = MessageInner(topic=topic, queue_id=queue_id, body=orig.body, flag=orig.flag, properties=props,
                           sys_flag=orig.sys_flag, born_timestamp=orig.born_timestamp, born_host=orig.born_host,
                           store_host=(b.cfg.broker_ip1, b.cfg.listen_port), reconsume_times=reconsume + 1,
                           tags_code=m.tags_code_of(props.get(m.TAGS)))
        b.schedule.apply_delay(msg)

        async def put() -> RemotingCommand:
            res = await b.store.put_message(msg)
            if res.status in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT):
                b.stats_manager.on_send_back(group, props[m.RETRY_TOPIC])
                return cmd.response()
            return cmd.response(ResponseCode.SYSTEM_ERROR, res.status.name)
        return put()
