"""Property tests: random registration/removal sequences never leave ghost routes; decoders only raise their
own clear errors on arbitrary input."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from brokerd.namesrv.body import BodyError, DataVersion, TopicConfig, decode_register_body
from brokerd.namesrv.lenient_json import LenientJSONError, loads
from brokerd.namesrv.routeinfo import BrokerRegistration, QueueData, RouteInfoManager

NAMES = ["broker-a", "broker-b"]
ADDRS = ["h1:1", "h2:1", "h3:1"]
TOPICS = ["T1", "T2", "T3"]
CHANNELS = [object(), object()]

op = st.one_of(
    st.tuples(st.just("reg"), st.sampled_from(NAMES), st.sampled_from(ADDRS), st.integers(0, 2),
              st.lists(st.sampled_from(TOPICS), min_size=1, max_size=3, unique=True), st.integers(0, 3),
              st.integers(0, 1), st.sampled_from([None, True, False])),
    st.tuples(st.just("unreg"), st.sampled_from(NAMES), st.sampled_from(ADDRS), st.integers(0, 2)),
    st.tuples(st.just("close"), st.integers(0, 1)),
    st.tuples(st.just("tick"), st.integers(0, 200_000)),
    st.tuples(st.just("topic"), st.sampled_from(TOPICS), st.sampled_from(NAMES)),
    st.tuples(st.just("wipe"), st.sampled_from(NAMES)),
    st.tuples(st.just("delete"), st.sampled_from(TOPICS)),
)


def check_invariants(m: RouteInfoManager) -> None:
    assert all(m.topic_queue_table.values()), "a topic without queue data"
    assert all(bd.broker_addrs for bd in m.broker_addr_table.values()), "a broker set without addresses"
    assert all(m.cluster_addr_table.values()), "a cluster without brokers"
    for names in m.cluster_addr_table.values():
        assert names <= m.broker_addr_table.keys()
    for qds in m.topic_queue_table.values():
        assert qds.keys() <= m.broker_addr_table.keys(), "queue data of an unknown broker"
    for topic in m.topic_queue_table:
        route = m.topic_route(topic)
        if route is not None:
            orjson.loads(orjson.dumps(route))


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=40))
def test_random_histories_leave_no_ghost_routes(ops: list[tuple[object, ...]]) -> None:
    now = [0]
    m = RouteInfoManager(lambda: now[0])
    for o in ops:
        kind = o[0]
        if kind == "reg":
            _, name, addr, bid, topics, counter, ch, acting = o
            assert isinstance(topics, list) and isinstance(counter, int) and isinstance(ch, int)
            m.register_broker(BrokerRegistration(
                cluster="C", broker_addr=str(addr), broker_name=str(name), broker_id=int(bid),  # type: ignore[call-overload]
                topic_config_table={t: TopicConfig(t, 4, 4, 6) for t in topics},
                data_version=DataVersion(counter, 0, 0), enable_acting_master=acting,  # type: ignore[arg-type]
            ), CHANNELS[ch])
        elif kind == "unreg":
            m.unregister_broker("C", str(o[2]), str(o[1]), int(o[3]))  # type: ignore[call-overload]
        elif kind == "close":
            m.on_channel_close(CHANNELS[int(o[1])])  # type: ignore[call-overload]
        elif kind == "tick":
            now[0] += int(o[1])  # type: ignore[call-overload]
            m.scan_not_active_brokers()
        elif kind == "topic":
            m.register_topic(str(o[1]), [QueueData(str(o[2]), 1, 1, 6)])
        elif kind == "wipe":
            m.wipe_write_perm(str(o[1]))
        else:
            m.delete_topic(str(o[1]))
        check_invariants(m)
    for ch in CHANNELS:
        m.on_channel_close(ch)
    assert m.topic_queue_table == {} and m.broker_addr_table == {} and m.cluster_addr_table == {}
    assert m.broker_live_table == {}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.booleans(), st.sampled_from([30, 401, 479]))
def test_register_body_decoder_only_raises_body_error(data: bytes, compressed: bool, version: int) -> None:
    try:
        decode_register_body(data, compressed=compressed, version=version)
    except BodyError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("{}[]:,'\"\\u0a-1e.5 tfnrule") + ["\\ud800", "\\u00e9", "\\udc00"]),
                max_size=40))
def test_lenient_reader_only_raises_its_error_and_yields_serialisable_values(tokens: list[str]) -> None:
    try:
        v = loads("".join(tokens))
    except LenientJSONError:
        return
    orjson.dumps(v)
