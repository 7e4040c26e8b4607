"""VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from brokerd.processors.tier_reads import answer_read
from brokerd.remoting.codes import ResponseCode
from brokerd.remoting.command import RemotingCommand
from brokerd.remoting.connection import Connection
from brokerd.store.results import QueryMessageResult

if TYPE_CHECKING:
    from brokerd.context import BrokerContext


class QueryProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, object]:
        return {33: self.view_by_id, 12: self.query_by_key}

    def view_by_id(self, conn: Connection, cmd: RemotingCommand) -> object:
        off = cmd.int_field("offset")
        store = self.broker.store

        def answer(raw: bytes | None) -> RemotingCommand:
            if raw is None:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {off}")
            return cmd.response(body=bytes(raw))

        return answer_read(store, lambda: store.look_message_by_offset(off), answer)

    def query_by_key(self, conn: Connection, cmd: RemotingCommand) -> object:
        topic, key = cmd.str_field("topic"), cmd.str_field("key")
        max_num = max(1, min(cmd.int_field("maxNum", 32), 64))
        begin, end = cmd.int_field("beginTimestamp", 0), cmd.int_field("endTimestamp", 2**62)
        store = self.broker.store

        def answer(r: QueryMessageResult) -> RemotingCommand:
            ext = {"indexLastUpdateTimestamp": str(r.index_last_update_timestamp),
                   "indexLastUpdatePhyoffset": str(r.index_last_update_phyoffset)}
            if not r.buffers:
                return cmd.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct",
                                    ext)  # fmt: skip
            return cmd.response(ext=ext, body=b"".join(bytes(x) for x in r.buffers))

        return answer_read(store, lambda: store.query_message(topic, key, max_num, begin, end), answer)
