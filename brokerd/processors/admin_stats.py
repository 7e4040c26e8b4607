"""Broker statistics requests: GET_BROKER_RUNTIME_INFO (28: RocketMQ's runtime table, keys as its broker and
store report them, plus ours) and VIEW_BROKER_STATS_DATA (315: one BrokerStatsManager item's minute, hour and day
windows)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Final

from brokerd.message import decode_record
from brokerd.metadata.names import RMQ_SYS_SCHEDULE_TOPIC
from brokerd.processors.admin_common import dumps, reads
from brokerd.remoting.codes import RequestCode, ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection, Handler, HandlerResult
from brokerd.stats import dir_capacity, disk_used_ratio, human_bytes, runtime_text

if TYPE_CHECKING:
    from brokerd.context import BrokerContext

# capacities RocketMQ's BrokerConfig reports (the queues themselves do not exist here: requests are served as read)
POOL_CAPACITIES: Final = {"pullThreadPoolQueueCapacity": 100000, "litePullThreadPoolQueueCapacity": 100000,
                          "queryThreadPoolQueueCapacity": 20000, "EndTransactionThreadPoolQueueCapacity": 100000}
NO_TRANSIENT_POOL: Final = 2147483647  # remainTransientStoreBufferNumbs without a transient store pool


class StatsAdmin:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
                RequestCode.VIEW_BROKER_STATS_DATA: self.view_stats}

    def view_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name, key = cmd.str_field("statsName"), cmd.str_field("statsKey")
        data = self.broker.stats_manager.view(name, key)
        if data is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        return cmd.response(body=dumps(data))

    def runtime_info(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        return reads(self.broker.store, lambda: cmd.response(body=dumps({"table": self.table()})))

    def table(self) -> dict[str, str]:
        """RocketMQ's runtime table, then this broker's own keys (status, lane, sync, ACL counters)."""
        b = self.broker
        out = {**self._store_keys(), **self._traffic_keys(), **self._pool_keys(), **self._schedule_keys()}
        out.update({k: str(v) for k, v in b.runtime_info().items()})
        out["bootTimestamp"] = str(b.stats_manager.boot_ms)
        out["brokerActive"] = "true" if b.is_master() else "false"
        return out

    def _store_keys(self) -> dict[str, str]:
        st, cfg = self.broker.store, self.broker.cfg
        root = cfg.store_path_root_dir
        commit_dir = os.path.join(root, "commitlog")
        cq_dir = os.path.join(root, "consumequeue")
        ratio = disk_used_ratio(root)
        return {
            "commitLogMinOffset": str(st.min_phy_offset), "commitLogMaxOffset": str(st.max_phy_offset),
            "dispatchBehindBytes": str(max(0, st.max_phy_offset - st.dispatched_offset)),
            "remainHowManyDataToFlush": human_bytes(max(0, st.max_phy_offset - st.flushed_offset)),
            "commitLogDiskRatio": str(ratio), f"commitLogDiskRatio_{commit_dir}": str(ratio),
            "consumeQueueDiskRatio": str(disk_used_ratio(cq_dir if os.path.isdir(cq_dir) else root)),
            "commitLogDirCapacity": dir_capacity(root), "earliestMessageTimeStamp": str(self._earliest_time()),
            "pageCacheLockTimeMills": "0", "dispatchMaxBuffer": "0",
            "remainTransientStoreBufferNumbs": str(NO_TRANSIENT_POOL),
        }

    def _earliest_time(self) -> int:
        """Store time of the oldest message in the commit log (-1: none)."""
        st = self.broker.store
        if st.max_phy_offset <= st.min_phy_offset:
            return -1
        raw = st.look_message_by_offset(st.min_phy_offset)
        if raw is None:
            return -1
        try:
            return decode_record(raw)[0].store_timestamp
        except ValueError:
            return -1

    def _traffic_keys(self) -> dict[str, str]:
        b = self.broker
        s, sm = b.stats, b.stats_manager
        marks = sm.day_marks
        up = time.time_ns() // 1_000_000 - sm.boot_ms
        return {
            "msgPutTotalTodayNow": str(s.msgs_in), "msgGetTotalTodayNow": str(s.msgs_out),
            "msgPutTotalTodayMorning": str(marks.put_today), "msgPutTotalYesterdayMorning": str(marks.put_yesterday),
            "msgGetTotalTodayMorning": str(marks.get_today), "msgGetTotalYesterdayMorning": str(marks.get_yesterday),
            "putTps": sm.tps_line("put"), "getTransferredTps": sm.tps_line("get"),
            "getFoundTps": sm.tps_line("found"), "putMessageTimesTotal": str(s.msgs_in),
            "putMessageSizeTotal": str(s.bytes_in),
            "putMessageAverageSize": str(s.bytes_in / s.msgs_in if s.msgs_in else 0.0),
            "putMessageFailedTimes": str(s.errors), "runtime": runtime_text(up),
            "startAcceptSendRequestTimeStamp": "0",
            "timerReadBehind": "0", "timerOffsetBehind": "0", "timerCongestNum": "0", "timerEnqueueTps": "0.0",
            "timerDequeueTps": "0.0",
        }

    def _pool_keys(self) -> dict[str, Any]:
        """No thread pools here (requests are served as they are read): their queues are empty."""
        out = {f"{p}ThreadPoolQueue{k}": "0" for p in ("send", "pull", "litePull", "query")
               for k in ("Size", "HeadWaitTimeMills")}
        out.update({k: str(v) for k, v in POOL_CAPACITIES.items()})
        out["sendThreadPoolQueueCapacity"] = str(self.broker.cfg.send_thread_pool_queue_capacity)
        out["EndTransactionQueueSize"] = "0"
        return out

    def _schedule_keys(self) -> dict[str, str]:
        """ScheduleMessageService.buildRunningStats: `scheduleMessageOffset_<level>` = "delivered,max"."""
        b = self.broker
        out = {}
        for level, offset in sorted(b.meta.delay_offsets.all().items()):
            mx = b.store.max_offset_in_queue(RMQ_SYS_SCHEDULE_TOPIC, level - 1)
            out[f"scheduleMessageOffset_{level}"] = f"{offset},{mx}"
        return out
