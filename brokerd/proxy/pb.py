"""The ``apache.rocketmq.v2`` protobuf classes (RocketMQ 5's gRPC interface, ``proto/apache/rocketmq/v2``).

The ``.proto`` files ship in this package; at first import ``grpcio-tools``' protoc compiles them into a
descriptor set in a temporary file (~30 ms), and the message classes are built from it in a private descriptor
pool. No generated Python modules exist, in the tree or elsewhere. The classes are dynamic (typed ``Any``); the
service's method table (``METHODS``: name, client streaming, server streaming) comes from the same descriptors.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import pathlib
import tempfile
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE: Final = "apache.rocketmq.v2"
SERVICE: Final = f"{PACKAGE}.MessagingService"
PROTO_ROOT: Final = pathlib.Path(__file__).resolve().parent / "proto"


class ProtoBuildError(RuntimeError):
    """The shipped .proto files could not be compiled (grpcio-tools missing or broken)."""


def _descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    try:
        from grpc_tools import protoc
    except ImportError as e:  # pragma: no cover - a dependency of the project
        raise ProtoBuildError("grpcio-tools is required to build the gRPC endpoint's protobuf classes") from e
    include = str(importlib.resources.files("grpc_tools") / "_proto")
    fd, out = tempfile.mkstemp(suffix=".pb")
    os.close(fd)
    try:
        rc = protoc.main(["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--descriptor_set_out={out}",
                          "--include_imports", "apache/rocketmq/v2/service.proto"])
        if rc != 0:
            raise ProtoBuildError(f"protoc failed (exit {rc}) on {PROTO_ROOT}")
        return descriptor_pb2.FileDescriptorSet.FromString(pathlib.Path(out).read_bytes())
    finally:
        os.unlink(out)


def _build() -> tuple[dict[str, Any], Any]:
    pool = descriptor_pool.DescriptorPool()
    fds = _descriptor_set()
    for f in fds.file:
        pool.Add(f)
    classes = message_factory.GetMessageClassesForFiles([f.name for f in fds.file], pool)
    return dict(classes), pool


_CLASSES, POOL = _build()
METHODS: Final[tuple[tuple[str, bool, bool], ...]] = tuple(
    (m.name, m.client_streaming, m.server_streaming) for m in POOL.FindServiceByName(SERVICE).methods)


def message_class(name: str) -> Any:
    return _CLASSES[f"{PACKAGE}.{name}"]


@functools.cache
def request_class(method: str) -> Any:
    return _CLASSES[POOL.FindServiceByName(SERVICE).FindMethodByName(method).input_type.full_name]


@functools.cache
def response_class(method: str) -> Any:
    return _CLASSES[POOL.FindServiceByName(SERVICE).FindMethodByName(method).output_type.full_name]


@functools.cache
def enum_name(enum: str, value: int) -> str:
    """The name of ``value`` in enum ``enum`` (e.g. ``Code``), or its number as text."""
    ev = POOL.FindEnumTypeByName(f"{PACKAGE}.{enum}").values_by_number.get(value)
    return ev.name if ev is not None else str(value)


Duration: Any = _CLASSES["google.protobuf.Duration"]
Timestamp: Any = _CLASSES["google.protobuf.Timestamp"]
Status: Any = message_class("Status")
Resource: Any = message_class("Resource")
Message: Any = message_class("Message")
SystemProperties: Any = message_class("SystemProperties")
MessageQueue: Any = message_class("MessageQueue")
Broker: Any = message_class("Broker")
Endpoints: Any = message_class("Endpoints")
Address: Any = message_class("Address")
Assignment: Any = message_class("Assignment")
Settings: Any = message_class("Settings")
RetryPolicy: Any = message_class("RetryPolicy")
ExponentialBackoff: Any = message_class("ExponentialBackoff")
CustomizedBackoff: Any = message_class("CustomizedBackoff")
TelemetryCommand: Any = message_class("TelemetryCommand")
RecoverOrphanedTransactionCommand: Any = message_class("RecoverOrphanedTransactionCommand")
PrintThreadStackTraceCommand: Any = message_class("PrintThreadStackTraceCommand")
VerifyMessageCommand: Any = message_class("VerifyMessageCommand")
SendResultEntry: Any = message_class("SendResultEntry")
AckMessageResultEntry: Any = message_class("AckMessageResultEntry")


def duration_ms(d: Any) -> int:
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def duration(ms: int) -> Any:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def timestamp_ms(t: Any) -> int:
    return int(t.seconds) * 1000 + int(t.nanos) // 1_000_000


def timestamp(ms: int) -> Any:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)
