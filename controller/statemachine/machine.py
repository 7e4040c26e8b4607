"""The Raft `StateMachine` adapter: decodes log entries into events and applies them to the image."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from brokerd.remoting.codes import ResponseCode
from controller.statemachine.apply import ApplyResult, apply_event
from controller.statemachine.events import EventDecodeError, decode_event
from controller.statemachine.image import ControllerImage, decode_image, encode_image

log = structlog.get_logger(component="controller_sm")

ApplyListener = Callable[[int, ApplyResult], None]


class ControllerStateMachine:
    """Implements `controller.raft.api.StateMachine`: apply(index, data), snapshot(), restore(data)."""

    def __init__(self, image: ControllerImage | None = None) -> None:
        self.image = image if image is not None else ControllerImage()
        self.listeners: list[ApplyListener] = []

    def apply(self, index: int, data: bytes) -> ApplyResult:
        if not data:  # a Raft no-op entry (e.g. the leader's first entry of its term)
            self.image.applied_index = index
            return ApplyResult(ok=True)
        try:
            ev = decode_event(data)
        except EventDecodeError as e:
            # deterministic on every replica: a malformed entry is skipped identically everywhere
            log.error("controller_event_undecodable", index=index, error=str(e))
            self.image.applied_index = index
            return ApplyResult(ok=False, code=ResponseCode.SYSTEM_ERROR, remark=str(e))
        result = apply_event(self.image, ev)
        self.image.applied_index = index
        for cb in self.listeners:
            cb(index, result)
        return result

    def snapshot(self) -> bytes:
        return encode_image(self.image)

    def restore(self, data: bytes) -> None:
        # decode first: a corrupt snapshot raises SnapshotError and leaves the current image untouched
        new = decode_image(data)
        self.image.sets = new.sets
        self.image.applied_index = new.applied_index
