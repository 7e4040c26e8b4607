"""RocketMQ's recall handle (``RecallMessageHandle.HandleV1``): ``base64url("v1 <topic> <brokerName> <timestamp>
<UNIQ_KEY>")``, answered in a timer send's response header (``recallHandle``) and handed back in RECALL_MESSAGE.
The timestamp is the message's TIMER_OUT_MS + 1. Pure."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Final

VERSION_1: Final = "v1"
INVALID: Final = "recall handle is invalid"


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp: str  # as the handle has it (RocketMQ parses it leniently: not a number = -1)
    message_id: str  # the UNIQ_KEY

    @property
    def timestamp_ms(self) -> int:
        """``NumberUtils.toLong(timestamp, -1)``."""
        try:
            return int(self.timestamp) if self.timestamp.lstrip("+-").isdigit() else -1
        except ValueError:
            return -1


def encode_handle(topic: str, broker_name: str, timestamp: str, message_id: str) -> str:
    raw = " ".join((VERSION_1, topic, broker_name, timestamp, message_id))
    return base64.urlsafe_b64encode(raw.encode()).decode("ascii")


def decode_handle(handle: str) -> RecallHandle:
    """The handle's fields; ValueError(INVALID) for anything RocketMQ's ``decodeHandle`` refuses."""
    if not handle:
        raise ValueError(INVALID)
    text = handle
    try:  # Java's URL decoder: the URL-safe alphabet, padding optional
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
        items = raw.decode("utf-8").split(" ")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError(INVALID) from None
    while items and items[-1] == "":  # Java's String.split drops trailing empty strings
        items.pop()
    if len(items) < 5 or items[0] != VERSION_1:
        raise ValueError(INVALID)
    return RecallHandle(items[1], items[2], items[3], items[4])
