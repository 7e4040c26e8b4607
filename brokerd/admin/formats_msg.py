"""How mqadmin prints messages and what consumers report about them (pure): queryMsgById's detail block,
MessageExt.toString for printMsg, sendMessage's result table, ConsumerRunningInfo.formatString, queryCq."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from brokerd.admin.formats import java_map_str, jf
from brokerd.admin.javafmt import human, human2, jstr
from brokerd.admin.jsonx import pretty
from brokerd.admin.messaging import Message, SendResult
from brokerd.admin.model import MessageQueue, mq_table


def _host(h: tuple[str, int]) -> str:
    return f"{h[0]}:{h[1]}"


def props_str(m: Message) -> str:
    """Message.getProperties().toString() of a decoded message (HashMap of capacity 128)."""
    return java_map_str(m.ext.properties, capacity=128)


def message_detail(m: Message, body_path: str, charset: str | None, offset_id_label: bool = True) -> str:
    """QueryMsgByIdSubCommand.printMsg (and queryMsgByUniqueKey's block without the OffsetID line)."""
    e = m.ext
    s, d = "%-20s %s%n", "%-20s %d%n"
    out = [jf(s, "OffsetID:", m.offset_msg_id)] if offset_id_label else []
    out += [jf(s, "Topic:", e.topic), jf(s, "Tags:", f"[{jstr(m.tags)}]"), jf(s, "Keys:", f"[{jstr(m.keys)}]"),
            jf(d, "Queue ID:", e.queue_id), jf(d, "Queue Offset:", e.queue_offset),
            jf(d, "CommitLog Offset:", e.commit_log_offset), jf(d, "Reconsume Times:", e.reconsume_times),
            jf(s, "Born Timestamp:", human2(e.born_timestamp)), jf(s, "Store Timestamp:", human2(e.store_timestamp)),
            jf(s, "Born Host:", _host(e.born_host)), jf(s, "Store Host:", _host(e.store_host)),
            jf(d, "System Flag:", e.sys_flag), jf(s, "Properties:", props_str(m)),
            jf(s, "Message Body Path:", body_path)]
    if charset is not None:
        out.append(jf(s, "Message Body:", e.body.decode(charset, "replace")))
    return "".join(out)


def message_tracks(tracks: Iterable[tuple[str, str, str | None]], per_line: bool = True) -> str:
    """messageTrackDetail's lines: MessageTrack [consumerGroup=, trackType=, exceptionDesc=]."""
    rows = list(tracks)
    if not rows:
        return "\n\nWARN: No Consumer"
    sep = "\n" if per_line else ""
    return "\n\n" + "".join(f"MessageTrack [consumerGroup={g}, trackType={t}, exceptionDesc={jstr(x)}]{sep}"
                            for g, t, x in rows)


def _signed_bytes(b: bytes) -> str:
    return "[" + ", ".join(str(x - 256 if x > 127 else x) for x in b) + "]"


def message_ext_str(m: Message) -> str:
    """MessageExt.toString (with Message.toString inside), as printMsg prints it."""
    e = m.ext
    inner = (f"Message{{topic='{e.topic}', flag={e.flag}, properties={props_str(m)}, body={_signed_bytes(e.body)}, "
             f"transactionId='{jstr(e.properties.get('__transactionId__'))}'}}")
    return (f"MessageExt [brokerName={m.broker_name}, queueId={e.queue_id}, storeSize={e.store_size}, "
            f"queueOffset={e.queue_offset}, sysFlag={e.sys_flag}, bornTimestamp={e.born_timestamp}, "
            f"bornHost=/{_host(e.born_host)}, storeTimestamp={e.store_timestamp}, storeHost=/{_host(e.store_host)}, "
            f"msgId={m.offset_msg_id}, commitLogOffset={e.commit_log_offset}, bodyCRC={e.body_crc}, "
            f"reconsumeTimes={e.reconsume_times}, preparedTransactionOffset={e.prepared_transaction_offset}, "
            f"toString()={inner}]")


def print_msg_line(m: Message, charset: str, print_body: bool) -> str:
    body = m.ext.body.decode(charset, "replace") if print_body else "NOT PRINT BODY"
    return jf("MSGID: %s %s BODY: %s%n", m.msg_id, message_ext_str(m), body)


SEND_FORMAT = "%-32s  %-4s  %-20s    %s%n"


def send_result_table(r: SendResult | None) -> str:
    head = jf(SEND_FORMAT, "#Broker Name", "#QID", "#Send Result", "#MsgId")
    if r is None:
        return head + jf(SEND_FORMAT, "Unknown", "Unknown", "Failed", "None")
    return head + jf(SEND_FORMAT, r.mq.broker_name, r.mq.queue_id, r.status, r.msg_id)


# -- consumers' own reports ----------------------------------------------------------------------------------------

def _props(d: Mapping[str, Any]) -> str:
    return "".join(jf("%-40s: %s%n", k, jstr(v)) for k, v in d.items())


def running_info(info: Mapping[str, Any]) -> str:
    """ConsumerRunningInfo.formatString."""
    out = ["#Consumer Properties#\n", _props(info.get("properties") or {})]
    out.append("\n\n#Consumer Subscription#\n")
    for i, sd in enumerate(info.get("subscriptionSet") or [], 1):
        out.append(jf("%03d Topic: %-40s ClassFilter: %-8s SubExpression: %s%n", i, sd.get("topic"),
                      bool(sd.get("classFilterMode")), sd.get("subString")))
    mqs = mq_table(info.get("mqTable"))
    out.append("\n\n#Consumer Offset#\n")
    out.append(jf("%-64s  %-32s  %-4s  %-20s%n", "#Topic", "#Broker Name", "#QID", "#Consumer Offset"))
    for mq in sorted(mqs):
        out.append(jf("%-32s  %-32s  %-4d  %-20d%n", mq.topic, mq.broker_name, mq.queue_id,
                      int(mqs[mq].get("commitOffset") or 0)))
    out.append("\n\n#Consumer MQ Detail#\n")
    out.append(jf("%-64s  %-32s  %-4s  %-20s%n", "#Topic", "#Broker Name", "#QID", "#ProcessQueueInfo"))
    for mq in sorted(mqs):
        out.append(jf("%-64s  %-32s  %-4d  %s%n", mq.topic, mq.broker_name, mq.queue_id, process_queue_str(mqs[mq])))
    out.append("\n\n#Consumer Pop Detail#\n")
    out.append(jf("%-32s  %-32s  %-4s  %-20s%n", "#Topic", "#Broker Name", "#QID", "#ProcessQueueInfo"))
    out.append("\n\n#Consumer RT&TPS#\n")
    out.append(jf("%-64s  %14s %14s %14s %14s %18s %25s%n", "#Topic", "#Pull RT", "#Pull TPS", "#Consume RT",
                  "#ConsumeOK TPS", "#ConsumeFailed TPS", "#ConsumeFailedMsgsInHour"))
    for topic, st in sorted((info.get("statusTable") or {}).items()):
        out.append(jf("%-32s  %14.2f %14.2f %14.2f %14.2f %18.2f %25d%n", topic, float(st.get("pullRT") or 0),
                      float(st.get("pullTPS") or 0), float(st.get("consumeRT") or 0),
                      float(st.get("consumeOKTPS") or 0), float(st.get("consumeFailedTPS") or 0),
                      int(st.get("consumeFailedMsgs") or 0)))
    user = info.get("userConsumerInfo")
    if user is not None:
        out.append("\n\n#User Consume Info#\n")
        out.append(_props(dict(sorted(user.items()))))
    if info.get("jstack") is not None:
        out.append("\n\n#Consumer jstack#\n" + str(info["jstack"]))
    return "".join(out)


def process_queue_str(pq: Mapping[str, Any]) -> str:
    def g(k: str) -> Any:
        return pq.get(k, 0)

    return (f"ProcessQueueInfo [commitOffset={g('commitOffset')}, cachedMsgMinOffset={g('cachedMsgMinOffset')}, "
            f"cachedMsgMaxOffset={g('cachedMsgMaxOffset')}, cachedMsgCount={g('cachedMsgCount')}, "
            f"cachedMsgSizeInMiB={g('cachedMsgSizeInMiB')}, transactionMsgMinOffset={g('transactionMsgMinOffset')}, "
            f"transactionMsgMaxOffset={g('transactionMsgMaxOffset')}, transactionMsgCount={g('transactionMsgCount')}, "
            f"locked={jstr(bool(g('locked')))}, tryUnlockTimes={g('tryUnlockTimes')}, "
            f"lastLockTimestamp={human(int(g('lastLockTimestamp')))}, droped={jstr(bool(g('droped')))}, "
            f"lastPullTimestamp={human(int(g('lastPullTimestamp')))}, "
            f"lastConsumeTimestamp={human(int(g('lastConsumeTimestamp')))}]")


def is_push(info: Mapping[str, Any]) -> bool:
    return str((info.get("properties") or {}).get("PROP_CONSUME_TYPE")) == "CONSUME_PASSIVELY"


def running_info_queues(info: Mapping[str, Any]) -> list[MessageQueue]:
    return sorted(mq_table(info.get("mqTable")))


def direct_result_str(r: Mapping[str, Any]) -> str:
    """ConsumeMessageDirectlyResult.toString."""
    return (f"ConsumeMessageDirectlyResult [order={jstr(bool(r.get('order')))}, "
            f"autoCommit={jstr(bool(r.get('autoCommit', True)))}, consumeResult={jstr(r.get('consumeResult'))}, "
            f"remark={jstr(r.get('remark'))}, spentTimeMills={r.get('spentTimeMills', 0)}]")


def consume_queue(body: Mapping[str, Any], index: int) -> str:
    """queryCq's output."""
    out = []
    if body.get("subscriptionData") is not None:
        out.append(f"Subscription data: \n{pretty(body['subscriptionData'])}\n======================================\n")
    if body.get("filterData") is not None:
        out.append(f"Filter data: \n{body['filterData']}\n======================================\n")
    out.append(f"Queue data: \nmax: {int(body.get('maxQueueIndex') or 0)}, min: {int(body.get('minQueueIndex') or 0)}\n")
    out.append("======================================\n")
    for i, q in enumerate(body.get("queueData") or [], index):
        out.append(f"idx: {i}\nConsumeQueueData{{physicOffset={q.get('physicOffset', 0)}, "
                   f"physicSize={q.get('physicSize', 0)}, tagsCode={q.get('tagsCode', 0)}, "
                   f"extendDataJson='{jstr(q.get('extendDataJson'))}', bitMap='{jstr(q.get('bitMap'))}', "
                   f"eval={jstr(bool(q.get('eval')))}, msg='{jstr(q.get('msg'))}'}}\n"
                   "======================================\n")
    return "".join(out)
