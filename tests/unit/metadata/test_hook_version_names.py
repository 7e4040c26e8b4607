from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokerd.metadata import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    DataVersion,
    MetadataChange,
    MetadataHub,
    NoopObserver,
    RecordingObserver,
    is_inherited,
    is_not_allowed_send_topic,
    is_readable,
    is_writeable,
    validate_group,
    validate_topic,
)

from .helpers import fake_clock

# ----- DataVersion -----


def test_data_version_json_uses_rocketmq_keys() -> None:
    dv = DataVersion(counter=3, state_version=2, timestamp=1234)
    assert dv.to_json() == {"counter": 3, "stateVersion": 2, "timestamp": 1234}
    assert DataVersion.from_json(dv.to_json()) == dv


def test_next_version_bumps_counter_and_timestamp_and_optionally_state() -> None:
    dv = DataVersion(counter=0, state_version=5, timestamp=1)
    dv.next_version(now_ms=99)
    assert (dv.counter, dv.state_version, dv.timestamp) == (1, 5, 99)
    dv.next_version(7, now_ms=100)
    assert (dv.counter, dv.state_version, dv.timestamp) == (2, 7, 100)


def test_data_version_copy_is_independent() -> None:
    dv = DataVersion(1, 0, 10)
    c = dv.copy()
    c.next_version(now_ms=11)
    assert dv == DataVersion(1, 0, 10)


def test_data_version_from_json_tolerates_missing_and_string_numbers_rejects_junk() -> None:
    assert DataVersion.from_json({"counter": "4"}) == DataVersion(4, 0, 0)
    with pytest.raises(ValueError, match="dataVersion.counter"):
        DataVersion.from_json({"counter": "four"})
    with pytest.raises(ValueError):
        DataVersion.from_json([1, 2])


# ----- hub -----


def test_emit_assigns_increasing_seq_and_reaches_every_observer(hub: MetadataHub) -> None:
    a, b = RecordingObserver(), RecordingObserver()
    hub.add_observer(a)
    hub.add_observer(b)
    hub.add_observer(NoopObserver())
    c1 = hub.emit("topic", "put", "T", {"topicName": "T"}, {"counter": 1})
    c2 = hub.emit("delay_offset", "put", "3", 10, {"counter": 1})
    assert (c1.seq, c2.seq) == (1, 2)
    assert a.changes == b.changes == [c1, c2]
    assert c1.stream == hub.stream_id
    hub.remove_observer(b)
    hub.emit("topic", "delete", "T", None, {"counter": 2})
    assert len(a.changes) == 3 and len(b.changes) == 2
    assert hub.seq == 3


def test_a_failing_observer_does_not_stop_the_others(hub: MetadataHub) -> None:
    class Boom:
        def on_change(self, change: MetadataChange) -> None:
            raise RuntimeError("observer bug")

    rec = RecordingObserver()
    hub.add_observer(Boom())
    hub.add_observer(rec)
    hub.emit("topic", "put", "T", {"topicName": "T"}, {})
    assert len(rec.changes) == 1
    assert hub.observer_errors == 1


def test_emit_rejects_unknown_kind_or_op(hub: MetadataHub) -> None:
    with pytest.raises(ValueError):
        hub.emit("acl", "put", "x", 1, {})
    with pytest.raises(ValueError):
        hub.emit("topic", "upsert", "x", 1, {})
    assert hub.seq == 0


def test_two_hubs_have_distinct_stream_ids() -> None:
    assert MetadataHub().stream_id != MetadataHub().stream_id
    assert MetadataHub(stream_id="s", clock_ms=fake_clock(5)).now_ms() == 5


def test_change_is_frozen(hub: MetadataHub) -> None:
    c = hub.emit("topic", "put", "T", {"topicName": "T"}, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.seq = 9  # type: ignore[misc]


@given(
    kind=st.sampled_from(["topic", "subscription_group", "consumer_offset", "delay_offset"]),
    value=st.one_of(
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.dictionaries(st.integers(0, 1024), st.integers(-1, 2**62), min_size=1),
        st.dictionaries(st.text(max_size=8), st.one_of(st.text(max_size=8), st.integers(-(2**63), 2**63 - 1), st.booleans())),
    ),
    seq=st.integers(1, 2**62),
)
def test_change_wire_round_trip(kind: str, value: object, seq: int) -> None:
    c = MetadataChange(kind, "put", "key@x", value, {"counter": 1, "stateVersion": 0, "timestamp": 5}, seq, "s1")  # type: ignore[arg-type]
    assert MetadataChange.from_wire(c.to_wire()) == c


def test_from_wire_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        MetadataChange.from_wire(b"\xc1not msgpack")
    good = MetadataChange("topic", "delete", "T", None, {}, 1, "s")
    with pytest.raises(ValueError, match="unknown kind"):
        MetadataChange.from_wire(dataclasses.replace(good, kind="nope").to_wire())
    with pytest.raises(ValueError, match="delete carries no value"):
        MetadataChange.from_wire(dataclasses.replace(good, value=3).to_wire())
    with pytest.raises(ValueError, match="bad seq"):
        MetadataChange.from_wire(dataclasses.replace(good, seq=0).to_wire())


# ----- names and perms -----


def test_perm_bits() -> None:
    assert (PERM_READ, PERM_WRITE, PERM_INHERIT) == (4, 2, 1)
    assert is_readable(6) and is_writeable(6) and not is_inherited(6)
    assert is_inherited(7) and not is_writeable(PERM_READ) and not is_readable(PERM_WRITE | PERM_INHERIT)


@pytest.mark.parametrize("name", ["TopicTest", "a", "%RETRY%group-1", "x|y", "A_b-9", "T" * 127, "%DLQ%" + "g" * 250])
def test_valid_topic_names(name: str) -> None:
    assert validate_topic(name) is None


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "blank"),
        ("   ", "blank"),
        ("a.b", "illegal characters"),
        ("topic\n", "illegal characters"),
        ("t o", "illegal characters"),
        ("тема", "illegal characters"),
        ("T" * 128, "max length 127"),
        ("%RETRY%" + "g" * 249, "max length 255"),
    ],
)
def test_invalid_topic_names(name: str, fragment: str) -> None:
    err = validate_topic(name)
    assert err is not None and fragment in err


def test_reserved_topics_are_not_sendable() -> None:
    for t in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"):
        assert is_not_allowed_send_topic(t)
        assert validate_topic(t) is None
        assert "forbidden" in (validate_topic(t, for_send=True) or "")
    assert not is_not_allowed_send_topic("TBW102")
    assert validate_topic("TopicTest", for_send=True) is None


def test_group_validation() -> None:
    assert validate_group("CID_ONS-HTTP-PROXY") is None
    assert validate_group("g" * 255) is None
    assert "max length" in (validate_group("g" * 256) or "")
    assert "illegal" in (validate_group("g@t") or "")
    assert "blank" in (validate_group("") or "")


def test_exported_regex_is_anchored() -> None:
    from brokerd.metadata import TOPIC_NAME_REGEX

    assert TOPIC_NAME_REGEX.match("ok_topic") is not None
    assert TOPIC_NAME_REGEX.match("a b") is None and TOPIC_NAME_REGEX.match("topic\n") is None
