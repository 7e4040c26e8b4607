"""Topic routes: the name server's body parsed, the queues a send or a receive picks (a message group always on
the same queue, as Guava's consistentHash places it), the cache, and a topic brokers will create on first send."""

from __future__ import annotations

import pytest

from brokerd.message.javahash import java_string_hash
from brokerd.proxy.codes import Code, ProxyError
from brokerd.proxy.route import RouteCache, consistent_hash, parse_route
from brokerd.remoting.command import RemotingCommand

# Guava 32's Hashing.consistentHash(key.hashCode(), buckets), printed by a Java program
GUAVA = [("g1", 8, 6), ("g1", 16, 9), ("g1", 33, 19), ("order-42", 8, 3), ("order-42", 16, 10), ("order-42", 33, 25),
         ("", 33, 0), ("组", 2, 1), ("组", 33, 2), ("abcdefghijklmnop", 16, 11), ("x", 8, 4), ("x", 33, 29)]

ROUTE = (b'{"queueDatas":[{"brokerName":"broker-b","readQueueNums":2,"writeQueueNums":2,"perm":6},'
         b'{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6},'
         b'{"brokerName":"broker-c","readQueueNums":4,"writeQueueNums":4,"perm":4}],'
         b'"brokerDatas":[{"cluster":"C","brokerName":"broker-a","brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}},'
         b'{"cluster":"C","brokerName":"broker-b","brokerAddrs":{1:"10.0.0.4:10921"}},'
         b'{"cluster":"C","brokerName":"broker-c","brokerAddrs":{0:"10.0.0.5:10931"}}]}')


@pytest.mark.parametrize("key,buckets,want", GUAVA)
def test_a_message_group_lands_where_rocketmqs_proxy_puts_it(key: str, buckets: int, want: int) -> None:
    assert consistent_hash(java_string_hash(key), buckets) == want


def test_sends_go_to_masters_write_queues_round_robin_and_groups_stick() -> None:
    r = parse_route("T", ROUTE)
    assert [(q.broker_name, q.queue_id, q.addr) for q in r.write_queues()] == [
        ("broker-a", i, "10.0.0.1:10911") for i in range(4)]  # broker-b has no master, broker-c is read-only
    picked = [r.select_write(None).queue_id for _ in range(8)]
    assert sorted(picked) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert len({r.select_write("order-1").queue_id for _ in range(5)}) == 1


def test_receives_take_one_acting_queue_per_readable_broker_preferring_masters() -> None:
    r = parse_route("T", ROUTE)
    assert [(q.broker_name, q.queue_id, q.addr) for q in r.read_brokers()] == [
        ("broker-a", -1, "10.0.0.1:10911"), ("broker-b", -1, "10.0.0.4:10921"), ("broker-c", -1, "10.0.0.5:10931")]
    assert r.select_read("broker-c").addr == "10.0.0.5:10931"
    with pytest.raises(ProxyError) as e:
        r.broker_addr("broker-b")
    assert e.value.code == Code.BAD_REQUEST


def test_a_topic_without_writable_queues_is_refused_forbidden() -> None:
    r = parse_route("T", b'{"queueDatas":[{"brokerName":"a","readQueueNums":1,"writeQueueNums":1,"perm":4}],'
                         b'"brokerDatas":[{"brokerName":"a","brokerAddrs":{"0":"h:1"}}]}')
    with pytest.raises(ProxyError) as e:
        r.select_write(None)
    assert e.value.code == Code.FORBIDDEN


class FakeNamesrv:
    def __init__(self, routes: dict[str, bytes]) -> None:
        self.routes = routes
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        self.calls.append((addr, cmd.code))
        if cmd.code == 351:
            return cmd.response(17, "no topic")
        body = self.routes.get(cmd.ext["topic"])
        return cmd.response(body=body) if body else cmd.response(17, "No topic route info")


async def test_routes_are_cached_and_a_missing_topic_follows_tbw102_or_is_not_found() -> None:
    ns = FakeNamesrv({"T": ROUTE})
    cache = RouteCache(lambda: ["ns:9876"], ttl_s=60)
    assert (await cache.get("T", ns)).message_type == "MIXED"
    n = len(ns.calls)
    await cache.get("T", ns)
    assert len(ns.calls) == n  # cached
    with pytest.raises(ProxyError) as e:
        await cache.get("Nope", ns)
    assert e.value.code == Code.TOPIC_NOT_FOUND
    ns.routes["TBW102"] = ROUTE
    auto = await cache.get("New", ns)
    assert [(q.broker_name, q.write_queue_nums) for q in auto.queues] == [("broker-b", 2), ("broker-a", 4)]
    cache.forget_broker("10.0.0.1:10911")
    assert cache.cached("T") is None and cache.cached("New") is None
