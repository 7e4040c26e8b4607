"""Timer messages, the pure part of the send path: which message is a timer message, when it is due, what RocketMQ
answers for a bad one, and the re-targeting to the timer topic (RocketMQ's ``HookUtils.handleScheduleMessage`` /
``transformTimerMessage``).

A message is a timer message when it carries ``TIMER_DELIVER_MS`` (an epoch time in ms), ``TIMER_DELAY_SEC``,
``TIMER_DELAY_MS`` (a delay from now) or the 4.x ``__STARTDELIVERTIME`` (an epoch time in ms, as the ONS clients set
it), is not a prepared / rolled-back transaction half (a committed one is handled at commit, as in RocketMQ), has
no delay level (a ``DELAY`` level wins and the timer properties are dropped) and is not stored in the timer topic
already (``TIMER_OUT_MS`` set). Its due time:

* unparsable (Java's ``Long.parseLong`` rules): MESSAGE_ILLEGAL, nothing stored;
* more than ``timerMaxDelaySec`` ahead: MESSAGE_ILLEGAL with RocketMQ's remark, nothing stored;
* in the future: parked in ``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS`` (the due time), ``REAL_TOPIC``
  and ``REAL_QID``; delivered to its real topic at or after that time (never before: RocketMQ rounds the time down
  to the precision, this broker does not);
* now or past: stored in its real topic at once, as a plain message (a ``TIMER_DEL_UNIQKEY`` one: MESSAGE_ILLEGAL).

A future message with ``TIMER_DEL_UNIQKEY`` (``<real topic>+<UNIQ_KEY>``) deletes that timer message instead of
being parked: RocketMQ's way to cancel one by send, also what RECALL_MESSAGE stores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Final

from brokerd import message as m
from brokerd.broker_config import BrokerConfig
from brokerd.message import MessageInner

TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
"""Where timer messages wait (RocketMQ's ``TimerMessageStore.TIMER_TOPIC``); queue 0."""
PROGRESS_TOPIC: Final = "rmq_sys_wheel_timer_progress"
"""The firing service's marker queue (queue 0): bracketed batches, recalls and state snapshots (brokerd/logbatch)."""
START_DELIVER_TIME: Final = "__STARTDELIVERTIME"
TIMER_PROPERTIES: Final = (m.TIMER_DELIVER_MS, m.TIMER_DELAY_SEC, m.TIMER_DELAY_MS, START_DELIVER_TIME)
PRECISIONS: Final = (100, 200, 500, 1000)
INT64_MAX: Final = (1 << 63) - 1
_JAVA_LONG: Final = re.compile(r"[+-]?[0-9]+\Z")

# RocketMQ's response codes for what it answers here (brokerd/remoting/codes.py has them too; this module is pure)
MESSAGE_ILLEGAL: Final = 13
SYSTEM_ERROR: Final = 1


def illegal_remark(max_delay_sec: int) -> str:
    """RocketMQ's remark for PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL."""
    return ("timer message illegal, the delay time should not be bigger than the max delay "
            f"{max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than the current time")


def not_enabled_remark() -> str:
    return "accurate timer message is not enabled, timerWheelEnable is false"


@dataclass(frozen=True, slots=True)
class TimerSettings:
    """The broker keys the timer service reads (validated by BrokerConfig)."""

    precision_ms: int = 1000
    max_delay_sec: int = 3 * 86_400
    roll_window_slots: int = 2 * 86_400
    wheel_enable: bool = True
    flush_interval_ms: int = 1000
    recall_enable: bool = False
    allow_recall_when_not_writeable: bool = True

    @classmethod
    def of(cls, cfg: BrokerConfig) -> TimerSettings:
        return cls(cfg.timer_precision_ms, cfg.timer_max_delay_sec, cfg.timer_roll_window_slot,
                   cfg.timer_wheel_enable, cfg.timer_flush_interval_ms, cfg.recall_message_enable,
                   cfg.allow_recall_when_broker_not_writeable)  # fmt: skip

    @property
    def max_delay_ms(self) -> int:
        return self.max_delay_sec * 1000

    @property
    def window_ms(self) -> int:
        """Timers due further ahead than this wait in the wheel as a roll (re-parked when it comes)."""
        return self.roll_window_slots * self.precision_ms


class Kind(Enum):
    PLAIN = 0  # stored as is (no timer, or due already)
    PARK = 1  # into the timer topic until ``deliver_ms``
    DELETE = 2  # deletes the timer message named by TIMER_DEL_UNIQKEY
    REFUSE = 3  # answered ``code`` / ``remark``, nothing stored


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: Kind
    deliver_ms: int = 0
    code: int = 0
    remark: str = ""


PLAIN: Final = Verdict(Kind.PLAIN)


def java_long(raw: str) -> int:
    """``Long.parseLong``: an optional sign and decimal digits within int64; ValueError otherwise."""
    if not _JAVA_LONG.match(raw):
        raise ValueError(f"not a long: {raw!r}")
    v = int(raw)
    if not -INT64_MAX - 1 <= v <= INT64_MAX:
        raise ValueError(f"out of the long range: {raw!r}")
    return v


def has_timer_property(props: dict[str, str]) -> bool:
    return any(k in props for k in TIMER_PROPERTIES)


def _delay_level(props: dict[str, str]) -> int:
    try:
        return int(props.get(m.DELAY) or 0)
    except ValueError:
        return 0


def deliver_time(props: dict[str, str], now_ms: int) -> int:
    """The due time a timer message asks for (ValueError when unparsable, as RocketMQ's parse fails)."""
    if m.TIMER_DELAY_SEC in props:
        return now_ms + java_long(props[m.TIMER_DELAY_SEC]) * 1000
    if m.TIMER_DELAY_MS in props:
        return now_ms + java_long(props[m.TIMER_DELAY_MS])
    if m.TIMER_DELIVER_MS in props:
        return java_long(props[m.TIMER_DELIVER_MS])
    return java_long(props[START_DELIVER_TIME])


def classify(msg: MessageInner, now_ms: int, s: TimerSettings) -> Verdict:
    """What the send (or end-transaction commit) path does with ``msg`` (see the module doc). Drops the timer
    properties of a message with a delay level, as RocketMQ does."""
    props = msg.properties
    if not has_timer_property(props):
        return PLAIN
    if msg.sys_flag & m.TRANSACTION_TYPE_MASK in (m.TRANSACTION_PREPARED_TYPE, m.TRANSACTION_ROLLBACK_TYPE):
        return PLAIN
    if _delay_level(props) > 0:
        for k in (m.TIMER_DELIVER_MS, m.TIMER_DELAY_SEC, m.TIMER_DELAY_MS):
            props.pop(k, None)
        return PLAIN
    if msg.topic == TIMER_TOPIC or m.TIMER_OUT_MS in props:
        return PLAIN
    if not s.wheel_enable:
        return Verdict(Kind.REFUSE, code=SYSTEM_ERROR, remark=not_enabled_remark())
    try:
        deliver = deliver_time(props, now_ms)
    except ValueError:
        return Verdict(Kind.REFUSE, code=MESSAGE_ILLEGAL, remark=illegal_remark(s.max_delay_sec))
    if deliver > now_ms:
        if deliver - now_ms > s.max_delay_ms or deliver > INT64_MAX:
            return Verdict(Kind.REFUSE, code=MESSAGE_ILLEGAL, remark=illegal_remark(s.max_delay_sec))
        return Verdict(Kind.DELETE if m.TIMER_DEL_UNIQKEY in props else Kind.PARK, deliver)
    if m.TIMER_DEL_UNIQKEY in props:
        return Verdict(Kind.REFUSE, code=MESSAGE_ILLEGAL, remark=illegal_remark(s.max_delay_sec))
    return PLAIN


def park(msg: MessageInner, deliver_ms: int) -> None:
    """Re-target ``msg`` to the timer topic: due time, real topic and queue in its properties."""
    props = msg.properties
    props[m.TIMER_OUT_MS] = str(deliver_ms)
    props[m.REAL_TOPIC] = msg.topic
    props[m.REAL_QID] = str(msg.queue_id)
    msg.topic = TIMER_TOPIC
    msg.queue_id = 0


def delete_key(real_topic: str, uniq_key: str) -> str:
    """RocketMQ's ``TimerMessageStore.buildDeleteKey``: what TIMER_DEL_UNIQKEY holds."""
    return f"{real_topic}+{uniq_key}"


def split_delete_key(key: str) -> tuple[str, str] | None:
    """(real topic, UNIQ_KEY) of a delete key; None when it is not one (topic names hold no '+')."""
    topic, sep, uniq = key.partition("+")
    return (topic, uniq) if sep and topic and uniq else None
