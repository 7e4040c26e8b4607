"""The proto's status codes (``apache.rocketmq.v2.Code``), the error that carries one, and the mapping of the
brokers' remoting response codes onto them. Pure."""

from __future__ import annotations

from enum import IntEnum

from brokerd.remoting.codes import ResponseCode as R


class Code(IntEnum):
    OK = 20000
    MULTIPLE_RESULTS = 30000
    BAD_REQUEST = 40000
    ILLEGAL_ACCESS_POINT = 40001
    ILLEGAL_TOPIC = 40002
    ILLEGAL_CONSUMER_GROUP = 40003
    ILLEGAL_MESSAGE_TAG = 40004
    ILLEGAL_MESSAGE_KEY = 40005
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    INVALID_TRANSACTION_ID = 40008
    ILLEGAL_MESSAGE_ID = 40009
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_INVISIBLE_TIME = 40011
    ILLEGAL_DELIVERY_TIME = 40012
    INVALID_RECEIPT_HANDLE = 40013
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
    UNRECOGNIZED_CLIENT_TYPE = 40015
    MESSAGE_CORRUPTED = 40016
    CLIENT_ID_REQUIRED = 40017
    ILLEGAL_POLLING_TIME = 40018
    ILLEGAL_OFFSET = 40019
    UNAUTHORIZED = 40100
    FORBIDDEN = 40300
    NOT_FOUND = 40400
    MESSAGE_NOT_FOUND = 40401
    TOPIC_NOT_FOUND = 40402
    CONSUMER_GROUP_NOT_FOUND = 40403
    OFFSET_NOT_FOUND = 40404
    REQUEST_TIMEOUT = 40800
    PAYLOAD_TOO_LARGE = 41300
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    PRECONDITION_FAILED = 42800
    TOO_MANY_REQUESTS = 42900
    REQUEST_HEADER_FIELDS_TOO_LARGE = 43100
    MESSAGE_PROPERTIES_TOO_LARGE = 43101
    INTERNAL_ERROR = 50000
    INTERNAL_SERVER_ERROR = 50001
    HA_NOT_AVAILABLE = 50002
    NOT_IMPLEMENTED = 50100
    PROXY_TIMEOUT = 50400
    MASTER_PERSISTENCE_TIMEOUT = 50401
    SLAVE_PERSISTENCE_TIMEOUT = 50402
    UNSUPPORTED = 50500
    VERSION_UNSUPPORTED = 50501
    VERIFY_FIFO_MESSAGE_UNSUPPORTED = 50502
    FAILED_TO_CONSUME_MESSAGE = 60000


_CODES = frozenset(int(c) for c in Code)


def known_code(n: int) -> Code | None:
    """``n`` as a Code, None when the proto has no such code."""
    return Code(n) if n in _CODES else None


class ProxyError(Exception):
    """A request the endpoint answers with ``code`` and ``message`` (the proto's Status)."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# remoting codes the brokers answer that are not in RocketMQ's own proxy table are mapped to the proto code a
# client can act on (RocketMQ's ResponseBuilder maps 0, 2, 3, 26 and the client timeout; the rest is
# INTERNAL_SERVER_ERROR there)
POLLING_FULL = 209
POLLING_TIMEOUT = 210
_REMOTING_TO_CODE: dict[int, Code] = {
    R.SUCCESS: Code.OK,
    R.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    R.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    R.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    R.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    R.NO_PERMISSION: Code.FORBIDDEN,
    R.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    R.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    R.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    R.SERVICE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    R.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    R.INVALID_PARAMETER: Code.BAD_REQUEST,
    R.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    R.SUBSCRIPTION_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    R.PULL_NOT_FOUND: Code.MESSAGE_NOT_FOUND,
    R.QUERY_NOT_FOUND: Code.MESSAGE_NOT_FOUND,
    POLLING_FULL: Code.TOO_MANY_REQUESTS,
    POLLING_TIMEOUT: Code.MESSAGE_NOT_FOUND,
    R.VERSION_NOT_SUPPORTED: Code.VERSION_UNSUPPORTED,
}


def from_remoting(code: int) -> Code:
    return _REMOTING_TO_CODE.get(code, Code.INTERNAL_SERVER_ERROR)


def remoting_error(code: int, remark: str | None, what: str) -> ProxyError:
    """The error for a broker's non-success answer ``code`` to ``what`` (e.g. "send message")."""
    return ProxyError(from_remoting(code), f"{what} failed: {remark or code} (remoting code {code})")
