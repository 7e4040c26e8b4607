"""RocketMQ's SQL92 message selector (``MessageSelector.bySql``): compile an expression, evaluate it on a
message's properties. Pure code, no I/O.

The language and its evaluation follow RocketMQ's filter module (an ActiveMQ selector cut down), including
its quirks, so a consumer gets here the messages it gets from a RocketMQ broker:

* Grammar: ``OR`` < ``AND`` < ``=``, ``<>``, ``IS [NOT] NULL`` < ``>``, ``>=``, ``<``, ``<=``,
  ``[NOT] BETWEEN x AND y``, ``[NOT] IN ('a', ...)``, ``[NOT] CONTAINS|STARTSWITH|ENDSWITH 'lit'`` < unary
  ``+``, ``-``, ``NOT`` < literals, properties, parentheses. Keywords are case-insensitive; identifiers are
  ``[A-Za-z_$][A-Za-z0-9_$]*``, looked up case-sensitively. Strings take single quotes (``''`` is a quote),
  numbers are decimal (``L`` suffix allowed) or floating point; ``TRUE``, ``FALSE``, ``NULL``. ``--`` and
  ``/* */`` comments. As in RocketMQ, parsing stops after the expression: trailing tokens are ignored.
* Parse-time checks: ordering operators need numeric constants; ``=`` never takes ``NULL`` (use ``IS NULL``);
  ``IN`` needs a property on its left; constant ``BETWEEN`` bounds must be ordered; the whole expression must
  be boolean; float literals below ``Double.MIN_VALUE`` (so ``0.0``) are rejected, as Java's check does.
* Values: properties are strings. Compared with a number they are parsed as that number's Java type (int,
  long or double; ``a > 5`` matches ``a=10``, while ``a=10.5`` or ``a=abc`` makes the evaluation fail); two
  strings under ``<`` etc. are compared as doubles; ``=`` on two strings is exact. SQL three-valued logic:
  a missing property is NULL, ``AND``/``OR`` short-circuit left to right, and anything but TRUE (FALSE,
  NULL, a failed evaluation) means the message does not match.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["FilterError", "Expr", "compile_expression", "matches"]


class FilterError(ValueError):
    """The expression does not compile (the message says where and why)."""


class _EvalError(Exception):
    """Evaluation failed (RocketMQ: a RuntimeException): the message does not match."""


# ---------------------------------------------------------------- values

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_DOUBLE_MIN: Final = 4.9e-324


@dataclass(frozen=True, slots=True)
class Num:
    """A number with its Java type: 'I' (int), 'J' (long) or 'D' (double)."""

    kind: str
    v: int | float


Value = None | bool | str | Num
_RANK: Final = {"I": 0, "J": 1, "D": 2}

_JAVA_BLANKS: Final = "".join(chr(c) for c in range(33))
_JAVA_INT = re.compile(r"[+-]?[0-9]+\Z")
_JAVA_DOUBLE = re.compile(
    r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?"
    r"|0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+[fFdD]?)\Z"
)


def _parse_as(kind: str, s: str) -> Num:
    """Java's Integer.valueOf / Long.valueOf / Double.valueOf of a string; _EvalError where Java throws."""
    if kind == "D":
        t = s.strip(_JAVA_BLANKS)  # Double.valueOf trims chars <= ' '
        if not _JAVA_DOUBLE.match(t):
            raise _EvalError(f"For input string: {s!r}")
        if "x" in t or "X" in t:
            return Num("D", float.fromhex(t.rstrip("fFdD")))
        return Num("D", float(t.rstrip("fFdD").replace("Infinity", "inf")))
    if not _JAVA_INT.match(s):
        raise _EvalError(f"For input string: {s!r}")
    v = int(s)
    lo, hi = (_INT_MIN, _INT_MAX) if kind == "I" else (_LONG_MIN, _LONG_MAX)
    if not lo <= v <= hi:
        raise _EvalError(f"For input string: {s!r}")
    return Num(kind, v)


def _double_key(d: float) -> tuple[int, float]:
    """Double.compareTo order: -0.0 < 0.0, NaN above everything and equal to itself."""
    if math.isnan(d):
        return (2, 0.0)
    if d == 0.0:
        return (0, -1.0 if math.copysign(1.0, d) < 0 else 0.0)
    return (0, d) if d < 0 else (1, d)


def _sign(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _compare_nums(a: Num, b: Num) -> int:
    kind = a.kind if _RANK[a.kind] >= _RANK[b.kind] else b.kind
    if kind == "D":
        return _sign(_double_key(float(a.v)), _double_key(float(b.v)))
    return _sign(a.v, b.v)


def _compare(lv: Value, rv: Value) -> int:
    """ComparisonExpression.compare with string conversion on (RocketMQ's parser always turns it on)."""
    if isinstance(lv, Num) and isinstance(rv, Num):
        return _compare_nums(lv, rv)
    if type(lv) is type(rv):  # two strings only get here from `=` (ordering compares them as doubles)
        return _sign(lv, rv)
    if isinstance(lv, str) and isinstance(rv, Num):
        return _compare_nums(_parse_as(rv.kind, lv), rv)
    if isinstance(lv, Num) and isinstance(rv, str):
        return _compare_nums(lv, _parse_as(lv.kind, rv))
    if isinstance(lv, str) and isinstance(rv, bool):
        return _sign(lv.lower() == "true", rv)
    if isinstance(lv, bool) and isinstance(rv, str):
        raise _EvalError("java.lang.ClassCastException")  # RocketMQ casts the Boolean to String here
    return -1  # other mixes: "less than", as RocketMQ answers


def _equal(lv: Value, rv: Value) -> bool:
    """``lv.equals(rv) || compare(lv, rv) == 0`` (Double.equals compares bits: NaN equals NaN, 0.0 not -0.0)."""
    if isinstance(lv, Num) and isinstance(rv, Num):
        return _compare_nums(lv, rv) == 0
    if type(lv) is type(rv) and lv == rv:
        return True
    return _compare(lv, rv) == 0


# ---------------------------------------------------------------- expressions


class Expr:
    """A compiled expression node."""

    boolean = False  # RocketMQ's BooleanExpression: usable as a condition

    def eval(self, props: Mapping[str, str]) -> Value:
        raise NotImplementedError


class Const(Expr):
    def __init__(self, value: Value, text: str) -> None:
        self.value = value
        self.text = text
        self.boolean = value is None or isinstance(value, bool)

    def eval(self, props: Mapping[str, str]) -> Value:
        return self.value


class Prop(Expr):
    def __init__(self, name: str) -> None:
        self.name = name

    def eval(self, props: Mapping[str, str]) -> Value:
        return props.get(self.name)


class _Bool(Expr):
    boolean = True


class BoolCast(_Bool):
    def __init__(self, e: Expr) -> None:
        self.e = e

    def eval(self, props: Mapping[str, str]) -> Value:
        v = self.e.eval(props)
        return None if v is None else (v if isinstance(v, bool) else False)


class Not(_Bool):
    def __init__(self, e: Expr) -> None:
        self.e = e

    def eval(self, props: Mapping[str, str]) -> Value:
        v = self.e.eval(props)
        return None if v is None else not v


class Negate(Expr):
    def __init__(self, e: Expr) -> None:
        self.e = e

    def eval(self, props: Mapping[str, str]) -> Value:
        v = self.e.eval(props)
        if not isinstance(v, Num):
            return None
        if v.kind == "D":
            return Num("D", -v.v)
        lo, hi = (_INT_MIN, _INT_MAX) if v.kind == "I" else (_LONG_MIN, _LONG_MAX)
        n = -int(v.v)
        return Num(v.kind, n if n <= hi else lo)  # Java overflow: -MIN_VALUE == MIN_VALUE


class Logic(_Bool):
    """AND (``decides=False``) / OR (``decides=True``): left to right, the right side only evaluated when the left
    does not decide; NULL when undecided and a side is NULL."""

    def __init__(self, a: Expr, b: Expr, decides: bool) -> None:
        self.a, self.b, self.decides = a, b, decides

    def eval(self, props: Mapping[str, str]) -> Value:
        lv = self.a.eval(props)
        if lv is self.decides:
            return lv
        rv = self.b.eval(props)
        if rv is self.decides:
            return rv
        return None if lv is None or rv is None else not self.decides


def And(a: Expr, b: Expr) -> Logic:  # noqa: N802 - reads as the operator
    return Logic(a, b, False)


def Or(a: Expr, b: Expr) -> Logic:  # noqa: N802 - reads as the operator
    return Logic(a, b, True)


class Equal(_Bool):
    def __init__(self, a: Expr, b: Expr) -> None:
        self.a, self.b = a, b

    def eval(self, props: Mapping[str, str]) -> Value:
        lv, rv = self.a.eval(props), self.b.eval(props)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        return True if lv is None else _equal(lv, rv)


_ORDER: Final[dict[str, Callable[[int], bool]]] = {
    ">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}


class Order(_Bool):
    def __init__(self, op: str, a: Expr, b: Expr) -> None:
        self.test = _ORDER[op]
        self.a, self.b = a, b

    def eval(self, props: Mapping[str, str]) -> Value:
        lv = self.a.eval(props)
        if lv is None:
            return None
        rv = self.b.eval(props)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            try:
                lv, rv = _parse_as("D", lv), _parse_as("D", rv)
            except _EvalError as exc:
                raise _EvalError("It's illegal to compare string by '>=', '>', '<', '<='") from exc
        return self.test(_compare(lv, rv))


class In(_Bool):
    def __init__(self, e: Expr, items: frozenset[str], negate: bool) -> None:
        self.e, self.items, self.negate = e, items, negate

    def eval(self, props: Mapping[str, str]) -> Value:
        v = self.e.eval(props)
        if not isinstance(v, str):
            return None
        return (v in self.items) != self.negate


_TEXT_TESTS: Final[dict[str, Callable[[str, str], bool]]] = {
    "CONTAINS": lambda v, s: s in v, "STARTSWITH": str.startswith, "ENDSWITH": str.endswith}


class TextTest(_Bool):
    def __init__(self, op: str, e: Expr, lit: str, negate: bool) -> None:
        self.test = _TEXT_TESTS[op]
        self.e, self.lit, self.negate = e, lit, negate

    def eval(self, props: Mapping[str, str]) -> Value:
        v = self.e.eval(props)
        if not self.lit or not isinstance(v, str):
            return False  # RocketMQ: FALSE (not NULL), for the NOT forms too
        return self.test(v, self.lit) != self.negate


def matches(expr: Expr, props: Mapping[str, str]) -> bool:
    """True only when the expression evaluates to TRUE (NULL, FALSE and a failed evaluation do not match)."""
    try:
        return expr.eval(props) is True
    except (_EvalError, ArithmeticError, ValueError, RecursionError):
        return False


# ---------------------------------------------------------------- lexer

_KEYWORDS: Final = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS",
                              "STARTSWITH", "ENDSWITH"})  # fmt: skip
_TOKEN = re.compile(
    r"""(?P<ws>[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r)|/\*.*?\*/)
      |(?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
      |(?P<dec>(?:0|[1-9][0-9]*)[lL]?)
      |(?P<id>[A-Za-z_$][A-Za-z0-9_$]*)
      |(?P<str>'(?:''|[^'])*')
      |(?P<op><>|>=|<=|[=<>(),+-])""",
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # float dec id kw str op eof
    text: str
    col: int


class _Lexer:
    """Tokens on demand: like RocketMQ's parser, text after the expression's next token is never read."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.buf: list[_Tok] = []

    def peek(self, k: int = 0) -> _Tok:
        while len(self.buf) <= k:
            self.buf.append(self._next())
        return self.buf[k]

    def take(self) -> _Tok:
        tok = self.peek()
        self.buf.pop(0)
        return tok

    def _next(self) -> _Tok:
        while True:
            if self.pos >= len(self.text):
                return _Tok("eof", "<EOF>", self.pos + 1)
            m = _TOKEN.match(self.text, self.pos)
            if m is None or m.lastgroup is None:
                raise FilterError(f"Lexical error at column {self.pos + 1}: encountered {self.text[self.pos]!r}")
            start, self.pos = self.pos, m.end()
            kind = m.lastgroup
            if kind == "ws":
                continue
            text = m.group()
            if kind == "id" and text.upper() in _KEYWORDS:
                return _Tok("kw", text.upper(), start + 1)
            return _Tok(kind, text, start + 1)


# ---------------------------------------------------------------- parser


class _Parser:
    def __init__(self, text: str) -> None:
        self.lx = _Lexer(text)

    def _is(self, kind: str, text: str | None = None, k: int = 0) -> bool:
        t = self.lx.peek(k)
        return t.kind == kind and (text is None or t.text == text)

    def _kw(self, word: str, k: int = 0) -> bool:
        return self._is("kw", word, k)

    def _expect(self, kind: str, text: str | None = None) -> _Tok:
        t = self.lx.take()
        if t.kind != kind or (text is not None and t.text != text):
            want = text or {"str": "a string literal"}.get(kind, kind)
            raise FilterError(f"Encountered {t.text!r} at column {t.col}, expected {want}")
        return t

    def parse(self) -> Expr:
        return _as_boolean(self._or())

    def _or(self) -> Expr:
        left = self._and()
        while self._kw("OR"):
            self.lx.take()
            left = Or(_as_boolean(left), _as_boolean(self._and()))
        return left

    def _and(self) -> Expr:
        left = self._equality()
        while self._kw("AND"):
            self.lx.take()
            left = And(_as_boolean(left), _as_boolean(self._equality()))
        return left

    def _equality(self) -> Expr:
        left = self._comparison()
        while True:
            if self._is("op", "=") or self._is("op", "<>"):
                op = self.lx.take().text
                right = self._comparison()
                _check_equal_operands(left, right)
                left = Equal(left, right) if op == "=" else Not(Equal(left, right))
            elif self._kw("IS") and self._kw("NULL", 1):
                self._take_n(2)
                left = Equal(left, Const(None, "NULL"))
            elif self._kw("IS"):
                self.lx.take()
                self._expect("kw", "NOT")
                self._expect("kw", "NULL")
                left = Not(Equal(left, Const(None, "NULL")))
            else:
                return left

    def _comparison(self) -> Expr:
        left = self._unary()
        while True:
            t = self.lx.peek()
            negate = t.kind == "kw" and t.text == "NOT" and self.lx.peek(1).kind == "kw"
            word = self.lx.peek(1 if negate else 0)
            if t.kind == "op" and t.text in _ORDER:
                self.lx.take()
                left = _order(t.text, left, self._unary())
            elif word.kind == "kw" and word.text == "BETWEEN":
                self._take_n(2 if negate else 1)
                low = self._unary()
                self._expect("kw", "AND")
                left = _between(left, low, self._unary(), negate)
            elif word.kind == "kw" and word.text == "IN":
                self._take_n(2 if negate else 1)
                left = self._in(left, negate)
            elif word.kind == "kw" and word.text in _TEXT_TESTS:
                self._take_n(2 if negate else 1)
                left = TextTest(word.text, left, self._string(), negate)
            else:
                return left

    def _take_n(self, n: int) -> None:
        for _ in range(n):
            self.lx.take()

    def _in(self, left: Expr, negate: bool) -> Expr:
        self._expect("op", "(")
        items = [self._string()]
        while self._is("op", ","):
            self.lx.take()
            items.append(self._string())
        self._expect("op", ")")
        if not isinstance(left, Prop):
            raise FilterError(f"Expected a property for In expression, got: {_show(left)}")
        return In(left, frozenset(items), negate)

    def _string(self) -> str:
        return self._expect("str").text[1:-1].replace("''", "'")

    def _unary(self) -> Expr:
        t = self.lx.peek()
        if t.kind == "op" and t.text == "+":
            self.lx.take()
            return self._unary()
        if t.kind == "op" and t.text == "-":
            self.lx.take()
            return Negate(self._unary())
        if t.kind == "kw" and t.text == "NOT":
            self.lx.take()
            return Not(_as_boolean(self._unary()))
        return self._primary()

    def _primary(self) -> Expr:
        t = self.lx.take()
        if t.kind == "op" and t.text == "(":
            e = self._or()
            self._expect("op", ")")
            return e
        if t.kind == "id":
            return Prop(t.text)
        if t.kind == "str":
            return Const(t.text[1:-1].replace("''", "'"), t.text)
        if t.kind == "dec":
            return Const(_decimal(t), t.text)
        if t.kind == "float":
            return Const(_float(t), t.text)
        if t.kind == "kw" and t.text in ("TRUE", "FALSE", "NULL"):
            return Const({"TRUE": True, "FALSE": False, "NULL": None}[t.text], t.text)
        raise FilterError(f"Encountered {t.text!r} at column {t.col}")


def _decimal(t: _Tok) -> Num:
    v = int(t.text.rstrip("lL"))
    if v > _LONG_MAX:
        raise FilterError(f"For input string: {t.text!r} (out of range of long)")
    return Num("I" if v <= _INT_MAX else "J", v)


def _float(t: _Tok) -> Num:
    v = float(t.text)
    if v > 1.7976931348623157e308 or v < _DOUBLE_MIN:
        raise FilterError(f"Value {t.text} is out of the range of double (or less than 4.9E-324)")
    return Num("D", v)


def _show(e: Expr) -> str:
    return e.text if isinstance(e, Const) else e.name if isinstance(e, Prop) else type(e).__name__


def _as_boolean(e: Expr) -> Expr:
    if e.boolean:
        return e
    if isinstance(e, Prop):
        return BoolCast(e)
    raise FilterError(f"Expression will not result in a boolean value: {_show(e)}")


def _check_less_than_operand(e: Expr) -> None:
    if isinstance(e, Const):
        if not isinstance(e.value, Num):
            raise FilterError(f"Value '{e.text}' cannot be compared.")
    elif e.boolean:
        raise FilterError("A boolean expression cannot be compared with <, <=, >, >= or BETWEEN.")


def _check_equal_operands(a: Expr, b: Expr) -> None:
    for e in (a, b):
        if isinstance(e, Const) and e.value is None:
            raise FilterError(f"'{e.text}' cannot be compared.")
    if isinstance(a, Const) and isinstance(b, Const) and a.boolean and not b.boolean:
        raise FilterError(f"'{a.text}' cannot be compared with '{b.text}'")


def _order(op: str, a: Expr, b: Expr) -> Expr:
    _check_less_than_operand(a)
    _check_less_than_operand(b)
    return Order(op, a, b)


def _between(e: Expr, low: Expr, high: Expr, negate: bool) -> Expr:
    if isinstance(low, Const) and isinstance(high, Const):
        if low.value is None or high.value is None:
            raise FilterError("Illegal values of between, values can not be null!")
        try:
            bad = _compare(low.value, high.value) > 0
        except _EvalError as exc:
            raise FilterError(f"Illegal values of between: {exc}") from exc
        if bad:
            raise FilterError(f"Illegal values of between, left value({low.text}) must less than or equal to "
                              f"right value({high.text})")  # fmt: skip
    if negate:
        return Or(_order("<", e, low), _order(">", e, high))
    return And(_order(">=", e, low), _order("<=", e, high))


@functools.lru_cache(maxsize=256)
def compile_expression(text: str) -> Expr:
    """The compiled expression (cached); FilterError when it does not compile."""
    if not text or not text.strip():
        raise FilterError("Expression can't be null!")
    try:
        return _Parser(text).parse()
    except RecursionError as exc:
        raise FilterError("Expression is nested too deeply") from exc
