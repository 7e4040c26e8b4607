"""The name server's route tables (spec 2.4, 5.1), as pure synchronous code with an injected clock.

`channel` values are opaque hashable tokens (the service passes its remoting Connection); the manager only
compares them, so a broker registered over a pooled connection is removed exactly when that connection closes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from brokerd.namesrv.body import PERM_READ, PERM_WRITE, DataVersion, TopicConfig

MASTER_ID = 0
DEFAULT_BROKER_CHANNEL_EXPIRED_MS = 120_000
SYNC_BROKER_MEMBER_GROUP_PREFIX = "rmq_sys_SYNC_BROKER_MEMBER_"


@dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}

    @classmethod
    def from_topic_config(cls, broker_name: str, tc: TopicConfig) -> QueueData:
        return cls(broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    zone_name: str | None = None
    enable_acting_master: bool = False

    def to_json(self) -> dict[str, Any]:
        """brokerAddrs keys are written as strings ("0"), i.e. standard JSON (spec trap 7)."""
        out: dict[str, Any] = {
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
            "brokerName": self.broker_name, "cluster": self.cluster, "enableActingMaster": self.enable_acting_master,
        }
        if self.zone_name is not None:
            out["zoneName"] = self.zone_name
        return out

    def clone(self) -> BrokerData:
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs), self.zone_name,
                          self.enable_acting_master)


class BrokerAddrInfo(NamedTuple):
    cluster: str
    addr: str


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_ms: int
    timeout_ms: int
    data_version: DataVersion
    channel: Hashable | None
    ha_server_addr: str


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    cluster: str
    broker_addr: str
    broker_name: str
    broker_id: int
    ha_server_addr: str = ""
    topic_config_table: Mapping[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = DataVersion()
    filter_server_list: list[str] | None = None
    zone_name: str | None = None
    timeout_ms: int | None = None
    enable_acting_master: bool | None = None  # None: an old (4.x) broker that does not send the field


@dataclass(frozen=True, slots=True)
class RegisterResult:
    master_addr: str | None = None
    ha_server_addr: str | None = None


@dataclass(frozen=True, slots=True)
class RemovedBroker:
    cluster: str
    broker_addr: str
    broker_name: str | None
    broker_id: int | None


class RouteInfoManager:
    def __init__(
        self,
        now_ms: Callable[[], int],
        *,
        default_timeout_ms: int = DEFAULT_BROKER_CHANNEL_EXPIRED_MS,
        support_acting_master: bool = False,
        delete_topic_with_broker_registration: bool = False,
    ) -> None:
        self.now_ms = now_ms
        self.default_timeout_ms = default_timeout_ms
        self.support_acting_master = support_acting_master
        self.delete_topic_with_broker_registration = delete_topic_with_broker_registration
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[BrokerAddrInfo, BrokerLiveInfo] = {}
        self.filter_server_table: dict[BrokerAddrInfo, list[str]] = {}

    # -- registration ---------------------------------------------------------------------------------------

    def register_broker(self, reg: BrokerRegistration, channel: Hashable | None = None) -> RegisterResult | None:
        """RouteInfoManager.registerBroker (spec 2.4 steps 1-7). None means "register broker failed".

        Step 4 (an incremental single-topic body must follow a full registration) is checked first, so a
        refused registration leaves no trace; steps 2 and 3 cannot change its outcome."""
        known = self.broker_addr_table.get(reg.broker_name)
        if (known is None or reg.broker_id not in known.broker_addrs) and len(reg.topic_config_table) == 1:
            return None
        self.cluster_addr_table.setdefault(reg.cluster, set()).add(reg.broker_name)
        bd = self.broker_addr_table.get(reg.broker_name)
        register_first = bd is None
        if bd is None:
            bd = BrokerData(reg.cluster, reg.broker_name)
            self.broker_addr_table[reg.broker_name] = bd
        old_version_broker = reg.enable_acting_master is None
        bd.enable_acting_master = bool(reg.enable_acting_master)
        bd.zone_name = reg.zone_name
        addrs = bd.broker_addrs
        # Step 2: one record per address. A slave turning master re-registers <0,addr>: drop <1,addr> first.
        for bid in [k for k, v in addrs.items() if v == reg.broker_addr and k != reg.broker_id]:
            del addrs[bid]
        # Step 3: a newer incarnation of this broker id (larger stateVersion) elsewhere wins.
        old_addr = addrs.get(reg.broker_id)
        if old_addr is not None and old_addr != reg.broker_addr:
            old_live = self.broker_live_table.get(BrokerAddrInfo(reg.cluster, old_addr))
            if old_live is not None and old_live.data_version.state_version > reg.data_version.state_version:
                if not self._addr_referenced(reg.broker_addr):
                    self.broker_live_table.pop(BrokerAddrInfo(reg.cluster, reg.broker_addr), None)
                return RegisterResult()
        prev = addrs.get(reg.broker_id)
        addrs[reg.broker_id] = reg.broker_addr
        register_first = register_first or not prev
        is_master = reg.broker_id == MASTER_ID
        is_prime_slave = not old_version_broker and not is_master and reg.broker_id == min(addrs)
        key = BrokerAddrInfo(reg.cluster, reg.broker_addr)
        if is_master or is_prime_slave:
            self._update_topics(reg, bd, key, register_first, is_prime_slave)
        # Step 7.
        timeout = reg.timeout_ms if reg.timeout_ms else self.default_timeout_ms
        self.broker_live_table[key] = BrokerLiveInfo(self.now_ms(), timeout, reg.data_version, channel,
                                                     reg.ha_server_addr)
        if reg.filter_server_list is not None:
            if reg.filter_server_list:
                self.filter_server_table[key] = list(reg.filter_server_list)
            else:
                self.filter_server_table.pop(key, None)
        if not is_master:
            master_addr = addrs.get(MASTER_ID)
            if master_addr is not None:
                master_live = self.broker_live_table.get(BrokerAddrInfo(reg.cluster, master_addr))
                if master_live is not None:
                    return RegisterResult(master_addr, master_live.ha_server_addr)
        return RegisterResult()

    def _update_topics(self, reg: BrokerRegistration, bd: BrokerData, key: BrokerAddrInfo, register_first: bool,
                       is_prime_slave: bool) -> None:
        """Step 6: create or overwrite QueueData; topics absent from an (incremental) body are kept."""
        name = reg.broker_name
        if self.delete_topic_with_broker_registration:
            for topic in [t for t, qds in self.topic_queue_table.items() if name in qds]:
                if topic not in reg.topic_config_table:
                    self._drop_queue_data(topic, name)
        version_changed = self.is_broker_topic_config_changed(key.cluster, key.addr, reg.data_version)
        for topic, tc in reg.topic_config_table.items():
            qds = self.topic_queue_table.get(topic)
            if not (register_first or version_changed or not qds or name not in qds):
                continue
            if is_prime_slave and bd.enable_acting_master:
                tc = replace(tc, perm=tc.perm & ~PERM_WRITE)
            self.topic_queue_table.setdefault(topic, {})[name] = QueueData.from_topic_config(name, tc)

    def _drop_queue_data(self, topic: str, broker_name: str) -> None:
        qds = self.topic_queue_table.get(topic)
        if qds is None:
            return
        qds.pop(broker_name, None)
        if not qds:
            del self.topic_queue_table[topic]

    def is_broker_topic_config_changed(self, cluster: str, broker_addr: str, data_version: DataVersion) -> bool:
        prev = self.query_broker_data_version(cluster, broker_addr)
        return prev is None or prev != data_version

    def query_broker_data_version(self, cluster: str, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(BrokerAddrInfo(cluster, broker_addr))
        return live.data_version if live is not None else None

    def update_broker_timestamp(self, cluster: str, broker_addr: str) -> bool:
        """BROKER_HEARTBEAT / QUERY_DATA_VERSION: refresh a live entry; False when the broker is unknown."""
        live = self.broker_live_table.get(BrokerAddrInfo(cluster, broker_addr))
        if live is None:
            return False
        live.last_update_ms = self.now_ms()
        return True

    # -- removal ---------------------------------------------------------------------------------------------

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> bool:
        """UNREGISTER_BROKER. Returns True when anything was known about this broker."""
        return self._unregister([(cluster, broker_addr, broker_name, broker_id)])

    def _unregister(self, items: Iterable[tuple[str, str, str | None, int | None]]) -> bool:
        found = False
        removed_names: set[str] = set()
        reduced_names: set[str] = set()
        for cluster, addr, name, _bid in items:
            bd = self.broker_addr_table.get(name) if name is not None else None
            if bd is not None:
                before = len(bd.broker_addrs)
                bd.broker_addrs = {k: v for k, v in bd.broker_addrs.items() if v != addr}
                found |= len(bd.broker_addrs) != before
                if bd.broker_addrs:
                    reduced_names.add(bd.broker_name)
                else:
                    self._remove_broker_name(bd.broker_name)
                    removed_names.add(bd.broker_name)
            # Keep the live entry while another broker set still lists the address (e.g. an unregister naming
            # the wrong broker), so that set is still expired or removed on close later: no ghost routes.
            if not self._addr_referenced(addr):
                key = BrokerAddrInfo(cluster, addr)
                found |= self.broker_live_table.pop(key, None) is not None
                self.filter_server_table.pop(key, None)
        for topic in list(self.topic_queue_table):
            for name in removed_names:
                self._drop_queue_data(topic, name)
        for name in reduced_names - removed_names:
            rest = self.broker_addr_table.get(name)
            if rest is not None and rest.enable_acting_master and MASTER_ID not in rest.broker_addrs:
                self._set_write_perm(name, wipe=True)
        return found

    def _remove_broker_name(self, broker_name: str) -> None:
        del self.broker_addr_table[broker_name]
        for cluster in [c for c, names in self.cluster_addr_table.items() if broker_name in names]:
            names = self.cluster_addr_table[cluster]
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]

    def _addr_referenced(self, addr: str) -> bool:
        return any(addr in bd.broker_addrs.values() for bd in self.broker_addr_table.values())

    def _broker_entries(self, key: BrokerAddrInfo) -> list[tuple[str, str, str | None, int | None]]:
        """The (cluster, addr, brokerName, brokerId) records of one live address, for removal (an address is one
        broker process, whatever cluster its broker set was first registered under)."""
        out: list[tuple[str, str, str | None, int | None]] = []
        for bd in self.broker_addr_table.values():
            for bid, addr in bd.broker_addrs.items():
                if addr == key.addr:
                    out.append((key.cluster, key.addr, bd.broker_name, bid))
        return out or [(key.cluster, key.addr, None, None)]

    def _remove_live(self, keys: Iterable[BrokerAddrInfo]) -> list[RemovedBroker]:
        removed: list[RemovedBroker] = []
        for key in keys:
            entries = self._broker_entries(key)
            self._unregister(entries)
            removed.extend(RemovedBroker(c, a, n, b) for c, a, n, b in entries)
        return removed

    def scan_not_active_brokers(self) -> list[RemovedBroker]:
        """Remove every broker whose last update is older than its timeout; returns what was removed."""
        now = self.now_ms()
        expired = [k for k, v in self.broker_live_table.items() if v.last_update_ms + v.timeout_ms < now]
        return self._remove_live(expired)

    def on_channel_close(self, channel: Hashable) -> list[RemovedBroker]:
        """Remove exactly the brokers whose current registration came over `channel`."""
        keys = [k for k, v in self.broker_live_table.items() if v.channel is channel]
        return self._remove_live(keys)

    # -- queries ---------------------------------------------------------------------------------------------

    def topic_route(self, topic: str, order_topic_conf: str | None = None) -> dict[str, Any] | None:
        """TopicRouteData as a JSON-ready dict, or None when the topic has no queue or no broker (-> 17)."""
        qds = self.topic_queue_table.get(topic)
        if not qds:
            return None
        brokers = [self.broker_addr_table[n].clone() for n in sorted(qds) if n in self.broker_addr_table]
        if not brokers:
            return None
        queue_datas = [qds[n] for n in sorted(qds)]
        if self.support_acting_master and not topic.startswith(SYNC_BROKER_MEMBER_GROUP_PREFIX):
            self._relabel_acting_masters(brokers, queue_datas)
        filter_servers: dict[str, list[str]] = {}
        if self.filter_server_table:
            for bd in brokers:
                for addr in bd.broker_addrs.values():
                    fs = self.filter_server_table.get(BrokerAddrInfo(bd.cluster, addr))
                    if fs is not None:
                        filter_servers[addr] = list(fs)
        route: dict[str, Any] = {
            "brokerDatas": [bd.to_json() for bd in brokers],
            "filterServerTable": filter_servers,
            "queueDatas": [qd.to_json() for qd in queue_datas],
        }
        if order_topic_conf is not None:
            route["orderTopicConf"] = order_topic_conf
        return route

    @staticmethod
    def _relabel_acting_masters(brokers: list[BrokerData], queue_datas: list[QueueData]) -> None:
        perms = {qd.broker_name: qd.perm for qd in queue_datas}
        for bd in brokers:
            if not bd.broker_addrs or not bd.enable_acting_master or MASTER_ID in bd.broker_addrs:
                continue
            perm = perms.get(bd.broker_name)
            if perm is not None and not perm & PERM_WRITE:
                bd.broker_addrs[MASTER_ID] = bd.broker_addrs.pop(min(bd.broker_addrs))

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {n: bd.to_json() for n, bd in self.broker_addr_table.items()},
            "clusterAddrTable": {c: sorted(names) for c, names in self.cluster_addr_table.items()},
        }

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(t for t, qds in self.topic_queue_table.items() if names & qds.keys())

    def has_broker(self, broker_name: str) -> bool:
        return broker_name in self.broker_addr_table

    def system_topics(self) -> dict[str, Any]:
        """RouteInfoManager.getSystemTopicList: every cluster name and broker name (each is a topic on its
        brokers), and one broker's address."""
        topics: set[str] = set()
        for cluster, names in self.cluster_addr_table.items():
            topics.add(cluster)
            topics.update(names)
        body: dict[str, Any] = {"topicList": sorted(topics)}
        for bd in self.broker_addr_table.values():
            if bd.broker_addrs:
                body["brokerAddr"] = bd.broker_addrs[min(bd.broker_addrs)]
                break
        return body

    def topics_with_sys_flag(self, unit: bool | None, unit_sub: bool | None) -> list[str]:
        """Topics whose queue data carry TopicSysFlag's unit / unit-sub bits as asked (None: either)
        (getUnitTopics, getHasUnitSubTopicList, getHasUnitSubUnUnitTopicList)."""
        out = []
        for topic, qds in self.topic_queue_table.items():
            for qd in qds.values():
                has_unit, has_sub = bool(qd.topic_sys_flag & 0x1), bool(qd.topic_sys_flag & 0x2)
                if (unit is None or has_unit == unit) and (unit_sub is None or has_sub == unit_sub):
                    out.append(topic)
                    break
        return sorted(out)

    def broker_member_group(self, cluster: str, broker_name: str) -> dict[str, Any]:
        bd = self.broker_addr_table.get(broker_name)
        addrs = {str(k): v for k, v in sorted(bd.broker_addrs.items())} if bd is not None else {}
        return {"brokerAddrs": addrs, "brokerName": broker_name, "cluster": cluster}

    # -- admin -----------------------------------------------------------------------------------------------

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV: the whole topic, or only its queues on the brokers of `cluster`."""
        if not cluster:
            self.topic_queue_table.pop(topic, None)
            return
        for name in self.cluster_addr_table.get(cluster, set()):
            self._drop_queue_data(topic, name)

    def register_topic(self, topic: str, queue_datas: list[QueueData]) -> str | None:
        """REGISTER_TOPIC_IN_NAMESRV. Returns an error text (nothing changed) when a broker is unknown."""
        for qd in queue_datas:
            if qd.broker_name not in self.broker_addr_table:
                return f"register topic {topic} contains unknown broker {qd.broker_name}"
        if queue_datas:
            qds = self.topic_queue_table.setdefault(topic, {})
            for qd in queue_datas:
                qds[qd.broker_name] = qd
        return None

    def wipe_write_perm(self, broker_name: str) -> int:
        return self._set_write_perm(broker_name, wipe=True)

    def add_write_perm(self, broker_name: str) -> int:
        return self._set_write_perm(broker_name, wipe=False)

    def _set_write_perm(self, broker_name: str, *, wipe: bool) -> int:
        """Wipe: perm &= ~WRITE. Add: perm = READ|WRITE (as Java). Returns the number of topics touched."""
        count = 0
        for qds in self.topic_queue_table.values():
            qd = qds.get(broker_name)
            if qd is None:
                continue
            perm = qd.perm & ~PERM_WRITE if wipe else PERM_READ | PERM_WRITE
            qds[broker_name] = replace(qd, perm=perm)
            count += 1
        return count
