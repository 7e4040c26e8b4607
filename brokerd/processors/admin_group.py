"""Subscription-group admin requests (RocketMQ's AdminBrokerProcessor): UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST (225), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), GET_SUBSCRIPTIONGROUP_CONFIG
(352), DELETE_SUBSCRIPTIONGROUP (207), CLONE_GROUP_OFFSET (314)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from brokerd.metadata.subscription import SubscriptionGroupConfig
from brokerd.processors.admin_common import AnswerOrFuture, dumps, once_replicated, slave_refusal
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler

if TYPE_CHECKING:
    from brokerd.context import BrokerContext


def group_known(broker: BrokerContext, group: str) -> bool:
    """The broker knows ``group``: a subscription-group config, committed offsets or an online consumer."""
    return (broker.meta.subscriptions.find(group) is not None or group in broker.consumers.groups
            or bool(broker.meta.offsets.topics_of_group(group)))


def unknown_group(cmd: RemotingCommand, group: str) -> RemotingCommand:
    return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist")


class GroupAdmin:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        c = RequestCode
        return {c.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group,
                c.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST: self.update_groups,
                c.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_groups, c.GET_SUBSCRIPTIONGROUP_CONFIG: self.get_group,
                c.DELETE_SUBSCRIPTIONGROUP: self.delete_group, c.CLONE_GROUP_OFFSET: self.clone_offset}

    @staticmethod
    def _parse(raw: Any) -> SubscriptionGroupConfig | str:
        try:
            cfg = SubscriptionGroupConfig.from_json(raw)
            cfg.validate()
        except (ValueError, TypeError) as e:
            return str(e)
        return cfg

    def update_group(self, conn: Connection, cmd: RemotingCommand) -> AnswerOrFuture:
        """Body: a SubscriptionGroupConfig (RocketMQ's JSON; fields it does not know are ignored)."""
        cfg = self._parse(cmd.json_body())
        if isinstance(cfg, str):
            return cmd.response(ResponseCode.SYSTEM_ERROR, cfg)
        self.broker.log.info("subscription_group_updated_by_admin", group=cfg.group_name, remote=conn.remote_addr[0])
        self.broker.meta.subscriptions.update(cfg)
        return once_replicated(self.broker, cmd)

    def update_groups(self, conn: Connection, cmd: RemotingCommand) -> AnswerOrFuture:
        """Body `SubscriptionGroupList` {"groupConfigList": [...]}: all checked before any is stored."""
        raw = cmd.json_body().get("groupConfigList")
        if not isinstance(raw, list) or not raw:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "groupConfigList is empty")
        configs = []
        for item in raw:
            cfg = self._parse(item)
            if isinstance(cfg, str):
                return cmd.response(ResponseCode.SYSTEM_ERROR, cfg)
            configs.append(cfg)
        for cfg in configs:
            self.broker.meta.subscriptions.update(cfg)
        return once_replicated(self.broker, cmd)

    def all_groups(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        subs = self.broker.meta.subscriptions
        body = {"subscriptionGroupTable": {k: v.to_json() for k, v in subs.all().items()}, "forbiddenTable": {},
                "dataVersion": subs.data_version.to_json()}
        return cmd.response(body=dumps(body))

    def get_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.str_field("group")
        cfg = self.broker.meta.subscriptions.find(group)
        if cfg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"No group in this broker. group: {group}")
        return cmd.response(body=dumps(cfg.to_json()))

    def delete_group(self, conn: Connection, cmd: RemotingCommand) -> AnswerOrFuture:
        """The group's config (and with `cleanOffset` its offsets); a group this broker does not have is not an
        error (a cluster-wide delete reaches every broker): the remark says so."""
        group = cmd.str_field("groupName")
        existed = self.broker.meta.subscriptions.delete(group)
        removed = self.broker.meta.offsets.remove_offset(group) if cmd.bool_field("cleanOffset") else 0
        self.broker.stats_manager.on_group_deleted(group)
        self.broker.log.info("subscription_group_deleted_by_admin", group=group, existed=existed,
                             offsets_removed=removed, remote=conn.remote_addr[0])
        answer = once_replicated(self.broker, cmd)
        if not existed and isinstance(answer, RemotingCommand) and answer.code == ResponseCode.SUCCESS:
            answer.remark = f"subscription group [{group}] does not exist in this broker, nothing deleted"
        return answer

    def clone_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """The source group's committed offsets (of ``topic``, or of every topic it consumed) copied to the
        destination group; unless ``offline``, topics the online source group no longer subscribes are skipped."""
        refusal = slave_refusal(self.broker, cmd, "Can not clone offset in slave broker")
        if refusal is not None:
            return refusal
        src, dest, topic = cmd.str_field("srcGroup"), cmd.str_field("destGroup"), cmd.opt_str("topic")
        b = self.broker
        if not group_known(b, src):
            return unknown_group(cmd, src)
        topics = {topic} if topic else b.meta.offsets.topics_of_group(src)
        cloned = []
        for t in sorted(topics):
            if b.meta.topics.get(t) is None:
                continue
            if (not cmd.bool_field("offline") and b.consumers.subscription_count(src) > 0
                    and b.consumers.find_subscription(src, t) is None):
                continue
            offsets = b.meta.offsets.offsets_of(src, t)
            if offsets:
                b.meta.offsets.commit_offsets(conn.remote_addr[0], dest, t, offsets)
                cloned.append(t)
        b.log.info("group_offset_cloned", src=src, dest=dest, topics=cloned, remote=conn.remote_addr[0])
        return cmd.response()
