"""RocketMQ's SQL92 selector: what a consumer receives for an expression and a message's properties, and which
expressions are refused at consumer start. Expected results are RocketMQ's (filter module semantics)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokerd.filter.sql92 import FilterError, compile_expression, matches

MSG = {"a": "10", "b": "abc", "f": "3.1415", "t": "true", "neg": "-7", "q": "it's", "TAGS": "TagA", "zero": "03"}

CASES = [
    # numbers: the property is parsed as the constant's Java type
    ("a > 5", True), ("a >= 10", True), ("a < 10", False), ("a <= 10", True), ("a > 5.0", True),
    ("f > 3.14", True), ("f > 3", False),  # "3.1415" is not an int: the evaluation fails, no match
    ("b > 5", False), ("neg < -5", True), ("neg = -7", True), ("a = 10", True), ("zero = 3", True),
    ("a < 3000000000", True),  # a long constant: the property is parsed as a long
    ("a BETWEEN 10 AND 20", True), ("a BETWEEN 11 AND 20", False), ("a NOT BETWEEN 11 AND 20", True),
    ("f BETWEEN 3 AND 4", False),  # int bounds, "3.1415" not an int
    # strings: exact, case-sensitive equality; IN takes string literals
    ("b = 'abc'", True), ("b = 'ABC'", False), ("b <> 'abc'", False), ("b <> 'x'", True),
    ("q = 'it''s'", True), ("TAGS IN ('TagA', 'TagB')", True), ("TAGS NOT IN ('TagB')", True),
    ("b IN ('x')", False), ("a IN ('10')", True),
    # two properties under < and > are compared as doubles
    ("f < a", True), ("a > f", True), ("a > b", False),
    # booleans: the property is read with Boolean.valueOf
    ("t = TRUE", True), ("b = FALSE", True), ("TRUE = t", False), ("TRUE", True), ("FALSE", False),
    # NULL: a missing property; three-valued logic
    ("missing IS NULL", True), ("a IS NOT NULL", True), ("missing = 'x'", False), ("'x' <> missing", True),
    ("missing > 1", False), ("NOT (missing > 1)", False), ("missing > 1 OR a = 10", True),
    ("missing > 1 AND a = 10", False), ("missing IN ('x')", False), ("missing NOT IN ('x')", False),
    ("NULL", False), ("a", False),  # a bare property is never TRUE (strings are not booleans)
    # evaluation order matters when an operand fails, as in RocketMQ
    ("b = 'abc' OR b > 5", True), ("b > 5 OR b = 'abc'", False), ("b <> 5", False),
    # CONTAINS / STARTSWITH / ENDSWITH: FALSE (not NULL) for a missing property, NOT forms included
    ("b CONTAINS 'bc'", True), ("b STARTSWITH 'ab'", True), ("b ENDSWITH 'ab'", False),
    ("missing NOT CONTAINS 'x'", False), ("NOT (missing CONTAINS 'x')", True), ("b CONTAINS ''", False),
    # syntax: keywords in any case, comments, parentheses, unary operators; parsing ends with the expression
    ("a > 5 and (b = 'abc' or TAGS = 'x')", True), ("a > +5 /* c */ AND a > -1 -- end\n", True),
    ("-a < 0", False),  # unary minus on a string property is NULL
    ("a = 10 b = 11", True), ("a = 0x10", False),  # parsing ends with the expression: `a = 0`, the rest ignored
    ("b LIKE 'a%'", False),  # no LIKE in RocketMQ: this is `b`, the rest ignored
    ("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 30)", True),
]


@pytest.mark.parametrize(("expr", "want"), CASES)
def test_rocketmq_semantics(expr: str, want: bool) -> None:
    assert matches(compile_expression(expr), MSG) is want


@pytest.mark.parametrize("expr", [
    "", "   ", "a > 'x'", "a > TRUE", "a = NULL", "1", "'x'", "a IN (1, 2)", "'x' IN ('x')", "a BETWEEN 5 AND 1",
    "a > 0.0", "NOT a > 1", "(a = 1) > 2", "a = ", "a ==  1", "#", "a = 1 #", "a = 'open", "TRUE = 1",
    "99999999999999999999 = a", "NOT 1",
])  # fmt: skip
def test_refused_expressions(expr: str) -> None:
    with pytest.raises(FilterError):
        compile_expression(expr)


def test_errors_say_where() -> None:
    with pytest.raises(FilterError, match="column 7"):
        compile_expression("a IN (1)")
    with pytest.raises(FilterError, match="cannot be compared"):
        compile_expression("a > 'x'")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab '()=<>!,.-+0123456789xANDORNTISUL\n", max_size=40),
       st.dictionaries(st.sampled_from(["a", "b"]), st.text(max_size=5), max_size=2))
def test_any_text_compiles_or_is_refused_and_evaluates_to_a_bool(text: str, props: dict[str, str]) -> None:
    try:
        expr = compile_expression(text)
    except FilterError:
        return
    assert matches(expr, props) in (True, False)
