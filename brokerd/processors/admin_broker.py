"""Broker-wide admin requests: UPDATE_BROKER_CONFIG (25), GET_BROKER_CONFIG (26), TRIGGER_DELETE_FILES (27),
CLEAN_EXPIRED_CONSUMEQUEUE (306), DELETE_EXPIRED_COMMITLOG (329), GET_BROKER_HA_STATUS (907: RocketMQ's
HARuntimeInfo), GET_BROKER_EPOCH_CACHE (1007: the epoch entries of a broker in controller mode)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from brokerd.config_file import BlacklistedKey, ConfigError, config_update, to_properties
from brokerd.processors.admin_common import dumps
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler

if TYPE_CHECKING:
    from brokerd.context import BrokerContext
    from brokerd.ha.service import HAService

# RocketMQ's configBlackList ("configBlackList;brokerConfigPath") plus every key that would move data or escape
# the store (paths), point the broker at other brokers' or services' ports, or weaken the ACL
CONFIG_BLACKLIST: Final = frozenset({
    "configBlackList", "brokerConfigPath", "brokerConfigPaths", "storePathRootDir", "storePathCommitLog",
    "storePathConsumeQueue", "storePathIndex", "storeCheckpoint", "abortFile", "brokerName", "brokerClusterName",
    "brokerId", "listenPort", "fastListenPortEnable", "haListenPort", "haListenHost", "haMasterAddress",
    "brokerIP1", "brokerIP2", "namesrvAddr", "controllerAddr", "enableControllerMode", "aclEnable", "aclFilePath",
    "aclAccessKey", "aclSecretKey",
})
SECRET_KEYS: Final = frozenset({"aclSecretKey"})  # shown masked by GET_BROKER_CONFIG
MAX_GAP_IN_SYNC: Final = 256 * 1024 * 1024  # haMaxGapNotInSync: a classic slave further behind is not in sync
LONG_MAX: Final = 2**63 - 1  # EpochEntry.endOffset of the last (open) entry


def ha_runtime_info(ha: HAService, *, controller_mode: bool, max_offset: int, flushed: int) -> dict[str, Any]:
    """RocketMQ's HARuntimeInfo of this broker's HA service: a master's slave connections, or a slave's link to its
    master (timestamps in wall-clock ms; no per-connection transfer rate is measured here: 0)."""
    wall_now, mono_now = time.time_ns() // 1_000_000, time.monotonic_ns() // 1_000_000

    def wall(mono_ms: int) -> int:
        return wall_now - (mono_now - mono_ms)

    master = ha.master
    if master is not None:
        in_set = master.effective_set()
        conns = []
        for conn_id, c in sorted(master.conns.items()):
            peer = ha.conns.get(conn_id)
            ack = max(c.ack, 0)
            in_sync = (c.slave_id in in_set) if controller_mode else (c.ack >= 0 and max_offset - ack < MAX_GAP_IN_SYNC)
            conns.append({"addr": peer.peer if peer is not None else "", "diff": max_offset - ack, "inSync": in_sync,
                          "slaveAckOffset": ack, "transferFromWhere": max(c.start_offset, 0),
                          "transferredByteInSecond": 0})
        synced = (len(in_set) - 1) if controller_mode else sum(1 for x in conns if x["inSync"])
        return {"master": True, "masterCommitLogMaxOffset": max_offset, "inSyncSlaveNums": max(0, synced),
                "haConnectionInfo": conns, "haClientRuntimeInfo": _client_info(None, 0, 0, 0, False)}
    slave = ha.slave
    client = _client_info(ha.master_ha_addr, max_offset, wall(slave.last_read_ms) if slave else 0,
                          wall(slave.last_write_ms) if slave else 0, ha.slave_conn is not None, flushed)
    return {"master": False, "masterCommitLogMaxOffset": 0, "inSyncSlaveNums": 0, "haConnectionInfo": [],
            "haClientRuntimeInfo": client}


def _client_info(master_addr: str | None, max_offset: int, last_read: int, last_write: int, active: bool,
                 master_flush: int = 0) -> dict[str, Any]:
    return {"activated": active, "lastReadTimestamp": last_read, "lastWriteTimestamp": last_write,
            "masterAddr": master_addr or "", "masterFlushOffset": master_flush, "maxOffset": max_offset,
            "transferredByteInSecond": 0}


class BrokerAdmin:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        c = RequestCode
        return {c.UPDATE_BROKER_CONFIG: self.update_config, c.GET_BROKER_CONFIG: self.get_config,
                c.TRIGGER_DELETE_FILES: self.trigger_delete_files, c.DELETE_EXPIRED_COMMITLOG: self.delete_expired,
                c.CLEAN_EXPIRED_CONSUMEQUEUE: self.clean_expired_consume_queues, c.GET_BROKER_HA_STATUS: self.ha_status,
                c.GET_BROKER_EPOCH_CACHE: self.epoch_cache}

    def get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        props = self.broker.config_properties()
        text = to_properties({k: ("***" if k in SECRET_KEYS and v else v) for k, v in props.items()})
        return cmd.response(ext={"version": dumps(self.broker.config_version.to_json()).decode()},
                            body=text.encode())

    def update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            props = config_update(cmd.body or b"", CONFIG_BLACKLIST)
            self.broker.update_config(props)
        except ConfigError as e:
            code = ResponseCode.NO_PERMISSION if isinstance(e, BlacklistedKey) else ResponseCode.SYSTEM_ERROR
            return cmd.response(code, str(e))
        self.broker.log.info("broker_config_updated", keys=sorted(props), remote=conn.remote_addr[0])
        return cmd.response()

    def trigger_delete_files(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        removed = self.broker.store.clean_expired_files(force=True)
        return cmd.response(remark=f"removed {removed} files")

    def delete_expired(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """executeDeleteFilesManually: the expired commit-log files (older than fileReservedTime) go now, whatever
        the deleteWhen hour."""
        removed = self.broker.store.clean_expired_files(force=True)
        self.broker.log.info("expired_commitlog_deleted_by_admin", segments=removed, remote=conn.remote_addr[0])
        return cmd.response()

    def clean_expired_consume_queues(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """cleanExpiredConsumerQueue: consume-queue files pointing only below the commit log's first message go;
        the queues of topics no longer in the topic table whose every entry expired are removed."""
        st = self.broker.store
        cq_files, idx_files = st.correct_min_offsets()
        gone = []
        for topic in st.topics():
            if topic in self.broker.meta.topics.all():
                continue
            if all(st.max_offset_in_queue(topic, q) <= st.min_offset_in_queue(topic, q) for q in st.queue_ids(topic)):
                st.delete_topic(topic)
                gone.append(topic)
        self.broker.log.info("expired_consume_queues_cleaned", consume_queue_files=cq_files, index_files=idx_files,
                             topics=gone, remote=conn.remote_addr[0])
        return cmd.response()

    def ha_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        st = self.broker.store
        info = ha_runtime_info(self.broker.ha, controller_mode=self.broker.cfg.enable_controller_mode,
                               max_offset=st.max_phy_offset, flushed=st.flushed_offset)
        return cmd.response(body=dumps(info))

    def epoch_cache(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """EpochEntryCache: each epoch's [startOffset, endOffset) (the last one open) and the commit log's end."""
        cfg = self.broker.cfg
        if not cfg.enable_controller_mode:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "this request only for controllerMode ")
        entries = self.broker.store.epoch_entries()
        epochs = [{"epoch": e.epoch, "startOffset": e.start_offset,
                   "endOffset": entries[i + 1].start_offset if i + 1 < len(entries) else LONG_MAX}
                  for i, e in enumerate(entries)]
        body = {"brokerId": cfg.broker_id, "brokerName": cfg.broker_name, "clusterName": cfg.broker_cluster_name,
                "epochList": epochs, "maxOffset": self.broker.store.max_phy_offset}
        return cmd.response(body=dumps(body))
