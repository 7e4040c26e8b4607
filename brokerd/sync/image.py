"""The metadata image and the one pure apply function (record + image → image) shared by the broker's slave
apply (through the managers, which store exactly what ``merge`` computes), the tests and the Spark compaction job.

An image holds the tables keyed as change records key them (topic name, group name, ``group@topic``,
``str(level)``, ``topic@group`` for message request modes), each with the DataVersion of the last record applied
to it. Last write wins per key, in log order; a delete drops the key; a consumer-offset record carries only the queues that changed and merges into
the key's queue map. ``docs_from_image`` / ``image_from_docs`` convert to and from the broker's table documents
(``ConfigManager.export_state``: RocketMQ's file JSON), which is what snapshots carry. Pure code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from brokerd.metadata.hook import (
    KIND_CONSUMER_OFFSET,
    KIND_DELAY_OFFSET,
    KIND_MESSAGE_REQUEST_MODE,
    KIND_SUBSCRIPTION_GROUP,
    KIND_TOPIC,
)
from brokerd.sync.records import DELETED, SyncRecord

# snapshot section -> (kind, the table's field in the document)
SECTIONS: Final = {"topics": (KIND_TOPIC, "topicConfigTable"),
                   "subscriptionGroups": (KIND_SUBSCRIPTION_GROUP, "subscriptionGroupTable"),
                   "consumerOffsets": (KIND_CONSUMER_OFFSET, "offsetTable"),
                   "delayOffsets": (KIND_DELAY_OFFSET, "offsetTable"),
                   "messageRequestModes": (KIND_MESSAGE_REQUEST_MODE, "messageRequestModeTable")}
KINDS: Final = tuple(kind for kind, _ in SECTIONS.values())


@dataclass
class Table:
    entries: dict[str, Any] = field(default_factory=dict)
    data_version: dict[str, int] = field(default_factory=dict)


Image = dict[str, Table]


def empty_image() -> Image:
    return {kind: Table() for kind in KINDS}


def merge(kind: str, old: Any, rec: SyncRecord) -> Any:
    """The key's value after ``rec`` (None: the key is gone)."""
    if rec.change == DELETED:
        return None
    if kind == KIND_CONSUMER_OFFSET:
        return {**(old or {}), **rec.value}
    return rec.value


def apply_in_place(image: Image, rec: SyncRecord) -> None:
    table = image[rec.kind]
    value = merge(rec.kind, table.entries.get(rec.key), rec)
    if value is None:
        table.entries.pop(rec.key, None)
    else:
        table.entries[rec.key] = value
    table.data_version = dict(rec.data_version)


def apply(image: Image, rec: SyncRecord) -> Image:
    """``image`` with ``rec`` applied; ``image`` itself is not changed (the touched table is copied)."""
    out = dict(image)
    old = image[rec.kind]
    out[rec.kind] = Table(dict(old.entries), dict(old.data_version))
    apply_in_place(out, rec)
    return out


def fold(image: Image, records: Iterable[SyncRecord]) -> Image:
    """Apply records in order to a copy of ``image``."""
    out = {k: Table(dict(t.entries), dict(t.data_version)) for k, t in image.items()}
    for rec in records:
        apply_in_place(out, rec)
    return out


# ---------------------------------------------------------------------------------------------- documents


def _swap(key: str) -> str:
    first, _, second = key.partition("@")
    return second + "@" + first


def image_from_docs(docs: dict[str, Any]) -> Image:
    """Snapshot sections (``ConfigManager.export_state`` documents) → image."""
    image = empty_image()
    for section, (kind, table_field) in SECTIONS.items():
        doc = docs.get(section) or {}
        entries: dict[str, Any] = {}
        for name, raw in (doc.get(table_field) or {}).items():
            if kind == KIND_CONSUMER_OFFSET:
                entries[_swap(str(name))] = {int(q): int(o) for q, o in raw.items()}
            else:
                entries[str(name)] = raw
        image[kind] = Table(entries, dict(doc.get("dataVersion") or {}))
    return image


def docs_from_image(image: Image) -> dict[str, Any]:
    """Image → snapshot sections, in the shape the managers load (``ConfigManager.import_state``)."""
    docs: dict[str, Any] = {}
    for section, (kind, table_field) in SECTIONS.items():
        t = image[kind]
        if kind == KIND_CONSUMER_OFFSET:
            table: dict[str, Any] = {_swap(k): {str(q): o for q, o in v.items()} for k, v in t.entries.items()}
        else:
            table = dict(t.entries)
        docs[section] = {"dataVersion": dict(t.data_version), table_field: table}
    return docs


def same_image(a: Image, b: Image, *, versions: bool = True) -> bool:
    """Equal tables (and DataVersions when ``versions``)."""
    return all(a[k].entries == b[k].entries and (not versions or a[k].data_version == b[k].data_version)
               for k in KINDS)  # fmt: skip
