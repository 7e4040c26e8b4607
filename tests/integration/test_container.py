"""BrokerContainer (RIP-31): many brokers in one process, added and removed at runtime over the admin port."""

from __future__ import annotations

import pathlib
import socket
import subprocess
import time
import urllib.request

import orjson
import pytest

from brokerd.native import native
from tests.support import VENV_BIN, ClientRun, Cluster, broker_port, can_connect, rpc, wait_for, write_broker_conf

pytestmark = pytest.mark.integration


def mqadmin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VENV_BIN / "mqadmin"), *args], capture_output=True, text=True, timeout=60)


def create_topic(c: Cluster, topic: str, brokers: list[int], queues: int = 4) -> None:
    for i in brokers:
        assert rpc(c.broker_addr(i), 17, {"topic": topic, "readQueueNums": str(queues),
                                          "writeQueueNums": str(queues)}).code == 0

    def routable() -> bool:
        r = rpc(c.namesrv, 105, {"topic": topic})
        return r.code == 0 and len(orjson.loads(r.body)["queueDatas"]) == len(brokers)
    wait_for(routable, 10, f"{topic} routable on {len(brokers)} brokers")


def max_offsets(c: Cluster, i: int, topic: str, queues: int = 4) -> int:
    return sum(int(rpc(c.broker_addr(i), 30, {"topic": topic, "queueId": str(q)}).ext["offset"]) for q in range(queues))


def admin_addr(c: Cluster) -> str:
    return f"127.0.0.1:{c.admin_port}"


@pytest.fixture
def three(tmp_path: pathlib.Path):
    c = Cluster(tmp_path, brokers=3).start()
    yield c
    c.stop()


def test_three_brokers_take_traffic_on_all(three: Cluster, tmp_path: pathlib.Path) -> None:
    create_topic(three, "T_three", [0, 1, 2])
    code, rows = ClientRun("produce", three.client_env(TOPIC="T_three", COUNT=300), tmp_path / "p").wait(120)
    assert code == 0
    assert all(max_offsets(three, i, "T_three") > 0 for i in range(3))
    code, rows = ClientRun("pull", three.client_env(TOPIC="T_three", GROUP="G3", COUNT=300, TIMEOUT=60),
                           tmp_path / "c").wait(90)
    assert code == 0 and {r["recv"]["props"]["seq"] for r in rows if "recv" in r} == {str(i) for i in range(300)}
    out = mqadmin("listBrokers", "-c", admin_addr(three))
    assert out.returncode == 0 and all(f"DefaultCluster:broker-{x}:0" in out.stdout for x in "abc")


def test_added_broker_serves_within_a_second(three: Cluster, tmp_path: pathlib.Path) -> None:
    port = broker_port()
    conf = write_broker_conf(tmp_path / "broker-d.conf", name="broker-d", port=port, store=tmp_path / "store" / "d")
    t0 = time.monotonic()
    out = mqadmin("addBroker", "-c", admin_addr(three), "-b", str(conf))
    assert out.returncode == 0, out.stderr
    wait_for(lambda: rpc(f"127.0.0.1:{port}", 30, {"topic": "TBW102", "queueId": "0"}).code == 0, 1.0,
             "the added broker answering")
    serving = time.monotonic() - t0
    assert rpc(f"127.0.0.1:{port}", 17, {"topic": "T_new", "readQueueNums": "2", "writeQueueNums": "2"}).code == 0
    wait_for(lambda: rpc(three.namesrv, 105, {"topic": "T_new"}).code == 0, 5, "T_new routable")
    code, _ = ClientRun("produce", three.client_env(TOPIC="T_new", COUNT=20), tmp_path / "p").wait(60)
    assert code == 0
    code, rows = ClientRun("pull", three.client_env(TOPIC="T_new", GROUP="Gn", COUNT=20, TIMEOUT=30),
                           tmp_path / "c").wait(60)
    assert code == 0, f"serving after {serving:.3f}s"


def test_removing_a_broker_does_not_disturb_clients_of_the_others(three: Cluster, tmp_path: pathlib.Path) -> None:
    create_topic(three, "T_keep", [0, 1])
    consumer = ClientRun("push", three.client_env(TOPIC="T_keep", GROUP="Gk", COUNT=1500, TIMEOUT=120),
                         tmp_path / "c")
    wait_for(lambda: rpc(three.broker_addr(0), 38, {"consumerGroup": "Gk"}).code == 0, 30, "consumer registered")
    producer = ClientRun("produce", three.client_env(TOPIC="T_keep", COUNT=1500), tmp_path / "p")
    wait_for(lambda: sum(1 for r in producer.rows if "sent" in r) >= 300, 60, "production under way")
    out = mqadmin("removeBroker", "-c", admin_addr(three), "-b", "DefaultCluster:broker-c:0")
    assert out.returncode == 0, out.stderr
    assert not can_connect(three.ports[2])
    code, rows = producer.wait(120)
    sends = [r for r in rows if "sent" in r]
    assert code == 0 and len(sends) == 1500 and all(r.get("status") == "OK" for r in sends)
    code, rows = consumer.wait(120)
    assert code == 0 and len({r["recv"]["props"]["seq"] for r in rows if "recv" in r}) == 1500
    # broker-c is gone from the name server too
    cluster = orjson.loads(rpc(three.namesrv, 106).body)
    assert "broker-c" not in cluster["brokerAddrTable"]


def test_restart_brings_back_every_broker_and_message(tmp_path: pathlib.Path) -> None:
    c = Cluster(tmp_path, brokers=2).start()
    port = broker_port()
    conf = write_broker_conf(tmp_path / "broker-x.conf", name="broker-x", port=port, store=tmp_path / "store" / "x")
    assert mqadmin("addBroker", "-c", admin_addr(c), "-b", str(conf)).returncode == 0
    c.ports.append(port)
    create_topic(c, "T_restart", [0, 1, 2])
    code, _ = ClientRun("produce", c.client_env(TOPIC="T_restart", COUNT=150), tmp_path / "p").wait(60)
    assert code == 0
    before = [max_offsets(c, i, "T_restart") for i in range(3)]
    assert c.stop() == 0
    c.start()
    assert [max_offsets(c, i, "T_restart") for i in range(3)] == before
    code, rows = ClientRun("pull", c.client_env(TOPIC="T_restart", GROUP="Gr", COUNT=150, TIMEOUT=60),
                           tmp_path / "c").wait(90)
    assert code == 0 and len({r["recv"]["props"]["seq"] for r in rows if "recv" in r}) == 150
    assert c.stop() == 0


def test_bad_admin_requests_answer_errors_and_leave_brokers_serving(three: Cluster, tmp_path: pathlib.Path) -> None:
    admin = admin_addr(three)
    dup = mqadmin("addBroker", "-c", admin, "-b", str(tmp_path / "broker-a.conf"))
    assert dup.returncode == 1 and "already exists" in dup.stderr
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    busy = holder.getsockname()[1]
    try:
        conf = write_broker_conf(tmp_path / "busy.conf", name="broker-busy", port=busy, store=tmp_path / "busy",
                                 fastListenPortEnable="false")
        r = mqadmin("addBroker", "-c", admin, "-b", str(conf))
        assert r.returncode == 1 and "port in use" in r.stderr and str(busy) in r.stderr
    finally:
        holder.close()
    r = mqadmin("addBroker", "-c", admin, "-b", str(tmp_path / "missing.conf"))
    assert r.returncode == 1 and "missing.conf" in r.stderr
    bad = write_broker_conf(tmp_path / "bad.conf", name="broker-bad", port=broker_port(), store=tmp_path / "bad",
                            flushDiskType="SOMETIMES")
    r = mqadmin("addBroker", "-c", admin, "-b", str(bad))
    assert r.returncode == 1 and "flushDiskType" in r.stderr
    r = mqadmin("removeBroker", "-c", admin, "-b", "DefaultCluster:broker-zz:0")
    assert r.returncode == 1 and "211" in r.stderr and "broker-zz" in r.stderr
    r = mqadmin("updateBrokerConfig", "--brokerContainerAddr", admin, "--brokerIdentity", "DefaultCluster:broker-a:0",
                "-k", "brokerPermission", "-v", "many")
    assert r.returncode == 1 and "brokerPermission" in r.stderr
    r = mqadmin("getBrokerConfig", "--brokerContainerAddr", admin, "--brokerIdentity", "DefaultCluster:nope:0")
    assert r.returncode == 1 and "nope" in r.stderr
    assert mqadmin("removeBroker", "-c", admin, "-b", "not-an-identity").returncode == 1
    for i in range(3):
        assert rpc(three.broker_addr(i), 30, {"topic": "TBW102", "queueId": "0"}).code == 0
    out = mqadmin("listBrokers", "-c", admin)
    assert out.stdout.count("running") == 3


def test_update_and_get_broker_config_over_admin_port(three: Cluster) -> None:
    admin = admin_addr(three)
    ident = "DefaultCluster:broker-b:0"
    r = mqadmin("updateBrokerConfig", "--brokerContainerAddr", admin, "--brokerIdentity", ident, "-k",
                "brokerPermission", "-v", "4")
    assert r.returncode == 0, r.stderr
    cfg = mqadmin("getBrokerConfig", "--brokerContainerAddr", admin, "--brokerIdentity", ident).stdout
    assert f"{'brokerPermission':<50}=  4\n" in cfg
    send = {"a": "pg", "b": "TBW102", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0", "i": ""}
    assert rpc(three.broker_addr(1), 310, send, b"x").code == 16  # read-only now
    assert rpc(three.broker_addr(0), 17, {"topic": "T_ok"}).code == 0  # the others are untouched


def test_metrics_are_per_broker(three: Cluster) -> None:
    for i in range(10):  # without a UNIQ_KEY, then with one: the first creates the store's first segment (Python),
        # then the C lane (the first of which asks Python to create the topic)
        send = {"a": "pg", "b": "T_metrics", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0",
                "i": f"UNIQ_KEY\x01M{i}\x02" if i >= 5 else ""}
        assert rpc(three.broker_addr(0), 310, send, b"12345").code == 0
    log = three.daemon.output() if three.daemon else ""
    port = int(log.split("metrics port ")[1].split()[0].strip(","))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'rocketmq_messages_in_total{broker="DefaultCluster:broker-a:0"} 10' in text
    assert 'rocketmq_messages_in_total{broker="DefaultCluster:broker-b:0"} 0' in text
    lane = 9 if native is not None else 0  # the daemon inherits BROKERD_NATIVE from this process
    assert f'rocketmq_send_lane_messages_total{{broker="DefaultCluster:broker-a:0"}} {lane}' in text
    if native is not None:  # the one send the lane left to Python, by reason
        assert 'rocketmq_send_lane_fallbacks_total{broker="DefaultCluster:broker-a:0",reason="segment_full"} 1' in text
        assert 'rocketmq_send_lane_fallbacks_total{broker="DefaultCluster:broker-a:0",reason="new_topic"} 0' in text
        assert 'rocketmq_send_lane_fallbacks_total{broker="DefaultCluster:broker-a:0",reason="batch"} 0' in text
    out = mqadmin("brokerStatus", "-b", three.broker_addr(0))
    assert out.returncode == 0 and "msgPutTotalTodayNow" in out.stdout and ": 10" in out.stdout


def test_invalid_config_stops_startup_naming_the_key(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("listenPort=70000\n")  # port-ok: data, nothing binds it
    r = subprocess.run([str(VENV_BIN / "mqbrokercontainer"), "-c", str(conf)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "listenPort" in r.stderr
    broker = write_broker_conf(tmp_path / "b.conf", name="broker-a", port=broker_port(), store=tmp_path / "s",
                               fileReservedTime="-3")
    conf.write_text(f"listenPort=0\nembeddedNamesrvPort=0\nmetricsPort=-1\nbrokerConfigPaths={broker}\n"
                    f"containerStateFile={tmp_path / 'st.json'}\n")
    r = subprocess.run([str(VENV_BIN / "mqbrokercontainer"), "-c", str(conf)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "fileReservedTime" in r.stderr
