"""mqadmin's message commands through real processes: sending (read back by the real client), finding messages the
real client sent by id, key, unique key and offset, printing and consuming queues, the consume queue, send RT."""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterator

import pytest

from tests.integration.helpers.mqadmin import MQAdmin
from tests.support import ClientRun, Cluster, rpc, wait_for

pytestmark = pytest.mark.integration
TOPIC = "T_msg"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("mqadmin-msg"), brokers=2).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def mq(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> MQAdmin:
    m = MQAdmin(cluster.namesrv, cwd=str(tmp_path_factory.mktemp("mqadmin-cwd")))
    m.ok("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "2", "-w", "2")
    wait_for(lambda: rpc(cluster.namesrv, 105, {"topic": TOPIC}).code == 0, 10, f"{TOPIC} routable")
    return m


@pytest.fixture(scope="module")
def sent(cluster: Cluster, mq: MQAdmin, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    """Ten messages from the real client (keys key-0.., tags TagA/TagB); consumed by group G_msg."""
    tmp = tmp_path_factory.mktemp("clients")
    code, rows = ClientRun("produce", cluster.client_env(TOPIC=TOPIC, COUNT=10, TAGS="TagA,TagB"), tmp / "p").wait(90)
    assert code == 0
    code, _ = ClientRun("push", cluster.client_env(TOPIC=TOPIC, GROUP="G_msg", COUNT=10, TIMEOUT=60, LINGER_S=6),
                        tmp / "c").wait(90)  # LINGER_S: the client commits its offsets (every 5 s) before leaving
    assert code == 0
    return [r for r in rows if "sent" in r]


def test_send_message_is_read_by_the_real_client(cluster: Cluster, mq: MQAdmin, tmp_path: pathlib.Path) -> None:
    mq.ok("updateTopic", "-c", "DefaultCluster", "-t", "T_send")
    wait_for(lambda: rpc(cluster.namesrv, 105, {"topic": "T_send"}).code == 0, 10, "T_send routable")
    out = mq.ok("sendMessage", "-t", "T_send", "-p", "hello from mqadmin", "-k", "K1", "-c", "TagA")
    head, row = out.splitlines()
    assert head.split() == ["#Broker", "Name", "#QID", "#Send", "Result", "#MsgId"]
    assert re.fullmatch(r"broker-[ab]\s+\d\s+SEND_OK\s+[0-9A-F]{32}", row.strip())
    out = mq.ok("sendMessage", "-t", "T_send", "-p", "to queue 3", "-b", "broker-b", "-i", "3")
    assert out.splitlines()[1].split()[:3] == ["broker-b", "3", "SEND_OK"]
    code, rows = ClientRun("push", cluster.client_env(TOPIC="T_send", GROUP="G_send", COUNT=2, STOP_AFTER=2, TIMEOUT=30),
                           tmp_path / "c").wait(60)
    bodies = sorted(r["recv"]["body"] for r in rows if "recv" in r)
    assert bodies == ["hello from mqadmin", "to queue 3"]
    mq.fails("sendMessage", "-t", "T_send", "-p", "x", "-i", "1", needle="Broker name must be set")
    mq.fails("sendMessage", "-t", "T_nope", "-p", "x", needle="T_nope")
    mq.fails("sendMessage", "-t", "T_send", "-p", "x", "-b", "broker-zz", "-i", "0", needle="broker-zz")


def test_query_by_id_key_unique_key_and_offset(cluster: Cluster, mq: MQAdmin, sent: list[dict[str, object]],
                                               tmp_path: pathlib.Path) -> None:
    first = next(r for r in sent if r["sent"] == 0)
    uniq = str(first["msg_id"])
    detail = mq.ok("queryMsgById", "-t", TOPIC, "-i", uniq, "-f", "UTF-8")
    assert re.search(r"^Keys:\s+\[key-0\]$", detail, re.M) and re.search(r"^Tags:\s+\[TagA\]$", detail, re.M)
    assert "Message Body:        body-0-é✓" in detail
    assert "MessageTrack [consumerGroup=G_msg, trackType=NOT_ONLINE, exceptionDesc=CODE:206 DESC:" in detail
    offset_id = re.search(r"^OffsetID:\s+([0-9A-F]{32})$", detail, re.M)
    assert offset_id is not None
    by_offset_id = mq.ok("queryMsgById", "-t", TOPIC, "-i", offset_id.group(1))
    assert re.search(r"^Keys:\s+\[key-0\]$", by_offset_id, re.M)
    path = re.search(r"^Message Body Path:\s+(\S+)$", detail, re.M)
    assert path is not None and pathlib.Path(path.group(1)).read_bytes() == "body-0-é✓".encode()

    keyed = mq.ok("queryMsgByKey", "-t", TOPIC, "-k", "key-3").splitlines()
    assert keyed[0].split() == ["#Message", "ID", "#QID", "#Offset"] and len(keyed) == 2
    assert keyed[1].split()[0] == next(r for r in sent if r["sent"] == 3)["msg_id"]

    unique = mq.ok("queryMsgByUniqueKey", "-t", TOPIC, "-i", uniq)
    assert "OffsetID:" not in unique and re.search(r"^Keys:\s+\[key-0\]$", unique, re.M)

    queue = re.search(r"^Queue ID:\s+(\d+)$", detail, re.M)
    qoff = re.search(r"^Queue Offset:\s+(\d+)$", detail, re.M)
    store = re.search(r"^Store Host:\s+(\S+)$", detail, re.M)
    assert queue and qoff and store
    name = "broker-a" if store.group(1) == cluster.broker_addr(0) else "broker-b"
    at = mq.ok("queryMsgByOffset", "-t", TOPIC, "-b", name, "-i", queue.group(1), "-o", qoff.group(1))
    assert re.search(r"^Keys:\s+\[key-0\]$", at, re.M)

    mq.fails("queryMsgById", "-t", TOPIC, "-i", "7F0000010000000000000000DEADBEEF", needle="not found")
    online = ClientRun("push", cluster.client_env(TOPIC=TOPIC, GROUP="G_msg", COUNT=11, TIMEOUT=60), tmp_path / "c")
    try:
        mq.until(("queryMsgById", "-t", TOPIC, "-i", uniq), r"MessageTrack \[consumerGroup=G_msg, trackType=CONSUMED,",
                 30, "the message tracked as consumed by the online group")
    finally:
        online.kill()
    mq.fails("queryMsgByKey", "-t", TOPIC, "-k", "no-such-key", needle="no message")
    mq.fails("queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "999", needle="no message")
    mq.fails("queryMsgByOffset", "-t", TOPIC, "-b", "broker-zz", "-i", "0", "-o", "0", needle="broker-zz")


def test_print_and_consume_queues(mq: MQAdmin, sent: list[dict[str, object]]) -> None:
    printed = mq.ok("printMsg", "-t", TOPIC)
    lines = [ln for ln in printed.splitlines() if ln.startswith("MSGID: ")]
    assert len(lines) == 10 and all("MessageExt [brokerName=broker-" in ln and " BODY: body-" in ln for ln in lines)
    assert printed.count("--------------------------------------------------------") == 4
    assert len([ln for ln in mq.ok("printMsg", "-t", TOPIC, "-s", "TagB").splitlines()
                if ln.startswith("MSGID: ")]) == 5
    assert "BODY: NOT PRINT BODY" in mq.ok("printMsg", "-t", TOPIC, "-d", "false")
    since_2000 = mq.ok("printMsg", "-t", TOPIC, "-b", "2000-01-01#00:00:00:000")
    assert len([ln for ln in since_2000.splitlines() if ln.startswith("MSGID: ")]) == 10
    later = mq.ok("printMsg", "-t", TOPIC, "-b", "4102444800000")  # 2100-01-01: nothing that late
    assert "MSGID: " not in later and later.count("minOffset=") == 4
    mq.fails("printMsg", "-t", TOPIC, "-b", "01/01/2000", needle="yyyy-MM-dd#HH:mm:ss:SSS")

    tags = mq.ok("printMsgByQueue", "-t", TOPIC, "-a", "broker-a", "-i", "0", "-f", "true")
    counts = dict(re.findall(r"^Tag: (\S+)\s+Count: (\d+)$", tags, re.M))
    assert counts and set(counts) <= {"TagA", "TagB"}

    consumed = mq.ok("consumeMessage", "-t", TOPIC, "-b", "broker-a", "-i", "0")
    assert "Consume ok" in consumed and "print msg finished. status=NO_NEW_MSG" in consumed
    mq.fails("consumeMessage", "-t", TOPIC, "-i", "0", needle="Please set the brokerName before queueId!")
    mq.fails("consumeMessage", "-t", TOPIC, "-c", "0", needle="positive messageNumber")


def test_consume_queue_and_send_rt(cluster: Cluster, mq: MQAdmin, sent: list[dict[str, object]]) -> None:
    cq = mq.ok("queryCq", "-t", TOPIC, "-q", "0", "-i", "0", "-c", "2", "-b", cluster.broker_addr(0))
    assert cq.startswith("Queue data: \nmax: ") and "idx: 0\nConsumeQueueData{physicOffset=" in cq
    rt = mq.ok("checkMsgSendRT", "-t", TOPIC, "-a", "5", "-s", "64").splitlines()
    assert rt[0].split() == ["#Broker", "Name", "#QID", "#Send", "Result", "#RT"]
    assert len(rt) == 7 and all(r.split()[2] == "true" for r in rt[1:6]) and rt[6].startswith("Avg RT: ")
    status = mq.ok("sendMsgStatus", "-b", "broker-a", "-c", "3").splitlines()
    assert len(status) == 3 and all(re.match(r"rt=\d+ms, SendResult=SendResult \[sendStatus=SEND_OK, ", s)
                                    for s in status)
    mq.fails("sendMsgStatus", "-b", "broker-zz", needle="broker-zz")


def test_resend_a_stored_message(mq: MQAdmin, sent: list[dict[str, object]]) -> None:
    uniq = str(next(r for r in sent if r["sent"] == 0)["msg_id"])
    resent = mq.ok("queryMsgById", "-t", TOPIC, "-i", uniq, "-s", "true")
    assert resent.startswith(f"prepare resend msg. originalMsgId={uniq}SendResult [sendStatus=SEND_OK, msgId={uniq}, ")
    keyed = mq.ok("queryMsgByKey", "-t", TOPIC, "-k", "key-0").splitlines()
    assert len(keyed) == 3 and {k.split()[0] for k in keyed[1:]} == {uniq}  # the original and its resent copy
