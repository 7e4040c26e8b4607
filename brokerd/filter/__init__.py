"""Message filters a consumer's subscription asks for: tag hashes (``clients.SubscriptionData``) and SQL92
expressions on message properties (``sql92``). What the pull processor and CHECK_CLIENT_CONFIG share."""

from __future__ import annotations

from collections.abc import Callable

from brokerd.filter.sql92 import Expr, FilterError, compile_expression, matches
from brokerd.message import CorruptRecordError, record_properties

SQL92 = "SQL92"

__all__ = ["SQL92", "FilterError", "compile_filter", "is_tag_type", "not_supported_remark", "record_matcher"]


def is_tag_type(expression_type: str | None) -> bool:
    return not expression_type or expression_type.upper() == "TAG"


def not_supported_remark(expression_type: str) -> str:
    """RocketMQ's remark when enablePropertyFilter is off."""
    return f"The broker does not support consumer to filter message by {expression_type}"


def compile_filter(expression_type: str, expression: str | None) -> Expr:
    """The compiled SQL92 expression; FilterError for another type or an expression that does not compile."""
    if expression_type.upper() != SQL92:
        raise FilterError(f"unsupported expression type {expression_type!r} (TAG and SQL92 are)")
    return compile_expression(expression or "")


def record_matcher(expr: Expr) -> Callable[[bytes], bool]:
    """A reader ``record_filter``: the stored record's properties (TAGS among them) satisfy ``expr``."""

    def match(record: bytes) -> bool:
        try:
            return matches(expr, record_properties(record))
        except CorruptRecordError:
            return False

    return match
