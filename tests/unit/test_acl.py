"""ACL 1.0 core: signing (checked against a real C++ client's frames), address patterns, plain_acl.yml, the
decision for every permission kind, white lists, admin codes, reload, and fuzzed requests."""

from __future__ import annotations

import os

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokerd.acl import (
    BROKER_ADMIN_CODES,
    AclConfigError,
    AclFile,
    AclValidator,
    decide,
    load_plain_acl,
    parse_address_pattern,
    parse_plain_acl,
    sign_request,
    signature_matches,
)
from brokerd.acl.address import AddressPatternError
from brokerd.remoting.command import RemotingCommand

SAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "conf", "acl", "plain_acl.yml")
IP = "127.0.0.1"


def test_signature_matches_the_cpp_client_frames() -> None:
    # client-captures.txt: a C++ client without credentials signs with an empty secret; numbers are signed as text
    route = RemotingCommand(105, ext={"AccessKey": "", "OnsChannel": "ALIYUN",
                                      "Signature": "NdlR+VlmO/2AwqtO0Rt9XkDHzVw=", "topic": "T_messense"})
    assert signature_matches(route, "")
    send = RemotingCommand(310, body=b"harness message 0 @1795315797639", ext={
        "AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "Wt2qXUjRnnzEDDT9hpIoKdBZHYo=", "a": "PID_harness",
        "b": "T_cvs", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1795315797642", "h": "0",
        "i": "KEYS\x01key-0\x02TAGS\x01TagA\x02UNIQ_KEY\x017F0000014AAE3C27DE536CC1268A0000\x02WAIT\x01true\x02"
             "harness_seq\x010\x02", "j": "0", "k": "0", "l": "16", "m": "0"})
    assert signature_matches(send, "")
    send.body = b"tampered"
    assert not signature_matches(send, "")


def test_address_patterns() -> None:
    m = parse_address_pattern
    assert m("*").match("8.8.8.8") and m("*.*.*.*").match("1.2.3.4")
    assert not m("").match("127.0.0.1") and not m(None).match("127.0.0.1")
    assert m("192.168.0.*").match("192.168.0.7") and not m("192.168.0.*").match("192.168.1.7")
    r = m("192.168.1.1-100")
    assert r.match("192.168.1.1") and r.match("192.168.1.100") and not r.match("192.168.1.101")
    assert m("10.1-20.*.*").match("10.20.3.4") and not m("10.21.3.4").match("10.21.3.5")
    lst = m("127.0.0.1, 10.0.0.2")
    assert lst.match("127.0.0.1") and lst.match("10.0.0.2") and not lst.match("10.0.0.3")
    assert m("192.168.1.{1,2}").match("192.168.1.2") and not m("192.168.1.{1,2}").match("192.168.1.3")
    assert m("127.0.0.1").match("::ffff:127.0.0.1") and m("::1").match("0:0:0:0:0:0:0:1")
    for bad in ("192.168.1.300-1", "not-an-ip", "1.2.3", "*.1.2.3x", "2::ac5:78:1-200"):
        with pytest.raises(AddressPatternError):
            m(bad)


def test_sample_file_parses_like_rocketmq() -> None:
    acl = load_plain_acl(SAMPLE)
    a = acl.accounts["RocketMQ"]
    assert a.secret_key == "12345678" and not a.admin  # a YAML number read as text
    assert acl.accounts["rocketmq2"].admin
    assert acl.is_admin("rocketmq2", "12345678") and not acl.is_admin("rocketmq2", "1234567x")
    assert not acl.is_admin("RocketMQ", "12345678") and not acl.is_admin("nobody00", "12345678")


@pytest.mark.parametrize("doc, key", [
    ({"accounts": [{"accessKey": "short", "secretKey": "12345678"}]}, "longer than 6"),
    ({"accounts": [{"accessKey": "RocketMQ", "secretKey": "12345678", "defaultTopicPerm": "READ"}]}, "defaultTopicPerm"),
    ({"accounts": [{"accessKey": "RocketMQ", "secretKey": "12345678", "topicPerms": ["topicA"]}]}, "topicPerms"),
    ({"accounts": [{"accessKey": "RocketMQ", "secretKey": "12345678", "whiteRemoteAddress": "1.2"}]}, "whiteRemote"),
    ({"globalWhiteRemoteAddresses": ["x.y"]}, "globalWhiteRemoteAddresses"),
    ({"accounts": [{"accessKey": "RocketMQ", "secretKey": "12345678"}] * 2}, "defined twice"),
])
def test_malformed_files_name_the_key(doc: object, key: str) -> None:
    with pytest.raises(AclConfigError, match=key):
        parse_plain_acl(doc)


def _signed(code: int, ext: dict[str, str], body: bytes | None = None, ak: str = "RocketMQ",
            sk: str = "12345678") -> RemotingCommand:
    return sign_request(RemotingCommand(code, ext=dict(ext), body=body), ak, sk)


def _send(topic: str, **kw: str) -> RemotingCommand:
    return _signed(310, {"a": "PID_x", "b": topic, "e": "0"}, b"body", **kw)


def _pull(topic: str, group: str, **kw: str) -> RemotingCommand:
    return _signed(11, {"consumerGroup": group, "topic": topic, "queueId": "0"}, **kw)


@pytest.fixture
def acl():  # type: ignore[no-untyped-def]
    return load_plain_acl(SAMPLE)


def _ok(acl, cmd: RemotingCommand, ip: str = IP) -> bool:  # type: ignore[no-untyped-def]
    return decide(acl, cmd, ip, BROKER_ADMIN_CODES) is None


def test_topic_perms(acl) -> None:  # type: ignore[no-untyped-def]
    assert _ok(acl, _send("topicB"))  # PUB|SUB
    assert "topic:topicA" in decide(acl, _send("topicA"), IP, BROKER_ADMIN_CODES)  # DENY
    assert not _ok(acl, _send("topicC"))  # SUB only: no PUB
    assert not _ok(acl, _send("other"))  # defaultTopicPerm DENY
    assert _ok(acl, _pull("topicC", "groupC")) and _ok(acl, _pull("topicB", "groupB"))
    assert not _ok(acl, _pull("topicA", "groupC")) and not _ok(acl, _pull("other", "groupC"))


def test_group_perms(acl) -> None:  # type: ignore[no-untyped-def]
    assert _ok(acl, _pull("topicB", "anyGroup"))  # defaultGroupPerm SUB
    refusal = decide(acl, _pull("topicB", "groupA"), IP, BROKER_ADMIN_CODES)
    assert refusal is not None and "group:groupA" in refusal
    # a send to a retry topic is the group's SUB (consumer send-back path)
    assert _ok(acl, _signed(310, {"a": "groupC", "b": "%RETRY%groupC"}, b"x"))
    assert not _ok(acl, _signed(310, {"a": "groupA", "b": "%RETRY%groupA"}, b"x"))
    assert not _ok(acl, _signed(36, {"group": "groupA", "offset": "1"}))
    assert not _ok(acl, _signed(15, {"consumerGroup": "groupA", "topic": "topicB", "queueId": "0", "commitOffset": "1"}))
    assert not _ok(acl, _signed(15, {"consumerGroup": "groupB", "topic": "topicA", "queueId": "0", "commitOffset": "1"}))
    assert _ok(acl, _signed(15, {"consumerGroup": "groupB", "topic": "topicB", "queueId": "0", "commitOffset": "1"}))


def test_pop_and_recall_perms(acl) -> None:  # type: ignore[no-untyped-def]
    def pop(code: int, topic: str, group: str) -> RemotingCommand:
        return _signed(code, {"consumerGroup": group, "topic": topic, "queueId": "-1", "extraInfo": "0 1 2 0 0 b 0"})
    for code in (200050, 200051, 200053, 200054, 200055):  # POP, ACK, CHANGE_INVISIBLETIME, NOTIFICATION, POLLING
        assert _ok(acl, pop(code, "topicC", "groupC"))
        assert not _ok(acl, pop(code, "topicA", "groupC")) and not _ok(acl, pop(code, "topicC", "groupA"))
    def batch(topic: str, group: str) -> RemotingCommand:
        body = orjson.dumps({"acks": [{"c": group, "t": topic, "r": "0", "so": 0, "q": 0, "rq": 0, "pt": 1,
                                       "it": 1000, "b": "AQ=="}]})
        return _signed(200151, {}, body)
    assert _ok(acl, batch("topicC", "groupC")) and not _ok(acl, batch("topicA", "groupC"))
    assert not _ok(acl, batch("topicC", "groupA"))
    assigned = orjson.dumps({"topic": "topicA", "consumerGroup": "groupC", "clientId": "c"})
    assert not _ok(acl, _signed(400, {}, assigned))  # QUERY_ASSIGNMENT: SUB on the topic
    assert _ok(acl, _signed(370, {"topic": "topicB", "recallHandle": "x"}))  # RECALL: PUB on the topic
    assert not _ok(acl, _signed(370, {"topic": "topicC", "recallHandle": "x"}))  # SUB only
    mode = orjson.dumps({"topic": "topicB", "consumerGroup": "groupB", "mode": "POP", "popShareQueueNum": 0})
    assert "Need admin permission" in decide(acl, _signed(401, {}, mode), IP, BROKER_ADMIN_CODES)


def test_heartbeat_groups_and_subscriptions(acl) -> None:  # type: ignore[no-untyped-def]
    def hb(group: str, topic: str) -> RemotingCommand:
        body = orjson.dumps({"clientID": "c", "consumerDataSet": [
            {"groupName": group, "subscriptionDataSet": [{"topic": topic}]}]})
        return _signed(34, {}, body)
    assert _ok(acl, hb("groupC", "topicC"))
    assert not _ok(acl, hb("groupA", "topicC")) and not _ok(acl, hb("groupC", "topicA"))
    assert not _ok(acl, _signed(34, {}, b"[1,2"))  # unreadable body: refused, not crashed


def test_credentials(acl) -> None:  # type: ignore[no-untyped-def]
    assert "No accessKey" in decide(acl, RemotingCommand(310, ext={"b": "topicB"}), IP, BROKER_ADMIN_CODES)
    cpp_empty = RemotingCommand(310, ext={"AccessKey": "", "Signature": "x", "OnsChannel": "ALIYUN", "b": "topicB"})
    assert not _ok(acl, cpp_empty)
    assert "Check signature failed" in decide(acl, _send("topicB", sk="wrongpass"), IP, BROKER_ADMIN_CODES)
    assert "No acl config" in decide(acl, _send("topicB", ak="stranger"), IP, BROKER_ADMIN_CODES)
    cmd = _send("topicB")
    cmd.ext["b"] = "topicC"  # changed after signing
    assert not _ok(acl, cmd)


def test_admin_codes(acl) -> None:  # type: ignore[no-untyped-def]
    create = {"topic": "newTopic", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}
    assert "Need admin permission" in decide(acl, _signed(17, create), IP, BROKER_ADMIN_CODES)
    assert _ok(acl, _signed(17, create, ak="rocketmq2"))
    assert _ok(acl, _send("anything", ak="rocketmq2"))  # an admin without perm entries touches everything
    v = AclValidator(lambda: acl, admin_only=True)
    assert v.check(_signed(910, {}), IP) is not None and v.check(_signed(910, {}, ak="rocketmq2"), IP) is None


def test_white_addresses(acl) -> None:  # type: ignore[no-untyped-def]
    unsigned = RemotingCommand(310, ext={"b": "topicA"})
    assert _ok(acl, unsigned, "10.10.103.7") and _ok(acl, unsigned, "192.168.0.9")  # global: everything
    assert not _ok(acl, unsigned, "10.10.104.7")
    wrong = _signed(17, {"topic": "t"}, ak="rocketmq2", sk="wrongpass")
    assert _ok(acl, wrong, "192.168.1.20") and not _ok(acl, wrong, "192.168.2.20")  # the account's white address
    v = AclValidator(lambda: acl, admin_only=True)  # an account's white address does not make it admin
    non_admin = parse_plain_acl({"accounts": [{"accessKey": "RocketMQ", "secretKey": "12345678",
                                               "whiteRemoteAddress": "127.0.0.1"}]})
    v2 = AclValidator(lambda: non_admin, admin_only=True)
    assert v.check(wrong, "192.168.1.20") is None
    assert v2.check(_signed(910, {}, sk="wrongpass"), IP) is not None


def test_file_reload(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts:\n  - {accessKey: RocketMQ, secretKey: '12345678', defaultTopicPerm: DENY}\n")
    now = [0.0]
    f = AclFile(str(path), interval=1.0, clock=lambda: now[0])
    assert not _ok(f.current(), _send("topicB"))
    path.write_text("accounts:\n  - {accessKey: RocketMQ, secretKey: '12345678', defaultTopicPerm: PUB}\n")
    now[0] = 2.0
    assert _ok(f.current(), _send("topicB")) and f.reloads == 1
    path.write_text("accounts: [ {accessKey: RocketMQ")  # broken: the last good accounts stay
    now[0] = 4.0
    assert _ok(f.current(), _send("topicB")) and f.reloads == 1
    with pytest.raises(AclConfigError, match="cannot read"):
        AclFile(str(tmp_path / "missing.yml"))


_text = st.text(max_size=30)


@settings(max_examples=300, deadline=None)
@given(ext=st.dictionaries(_text, _text, max_size=8), body=st.one_of(st.none(), st.binary(max_size=64)),
       code=st.sampled_from([10, 11, 14, 15, 17, 25, 34, 35, 36, 38, 41, 46, 310, 320, 361, 999]),
       sig=st.one_of(st.just("AAAAAAAAAAAAAAAAAAAAAAAAAAA="), _text), ak=st.sampled_from(["RocketMQ", "rocketmq2", ""]))
def test_fuzzed_requests_never_pass_or_raise(ext: dict[str, str], body: bytes | None, code: int, sig: str,
                                             ak: str) -> None:
    acl = load_plain_acl(SAMPLE)
    cmd = RemotingCommand(code, ext={**ext, "AccessKey": ak, "Signature": sig}, body=body)
    assert decide(acl, cmd, IP, BROKER_ADMIN_CODES) is not None


class _Transport:
    def __init__(self) -> None:
        self.out = b""
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def writelines(self, data: list[bytes]) -> None:
        self.out += b"".join(bytes(d) for d in data)

    def write(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": ("10.9.8.7", 5000), "sockname": ("127.0.0.1", 1)}.get(name, default)


_headers = st.dictionaries(st.sampled_from(["AccessKey", "Signature", "OnsChannel", "topic", "b", "a", "group",
                                            "consumerGroup", "_UNIQUE_KEY_QUERY", "x"]),
                           st.one_of(st.text(max_size=20), st.sampled_from(["RocketMQ", "rocketmq2", "topicB"])),
                           max_size=8)


@settings(max_examples=150, deadline=None)
@given(ext=_headers, body=st.binary(max_size=40), code=st.sampled_from([10, 11, 15, 17, 34, 36, 310, 910]),
       binary=st.booleans())
async def test_fuzzed_frames_through_a_guarded_connection(ext: dict[str, str], body: bytes, code: int,
                                                          binary: bool) -> None:
    """Random headers and signatures on the wire: every request is answered NO_PERMISSION, no handler runs, the
    connection stays open (the guard never raises out of the connection)."""
    from brokerd.acl.glue import AclGuard
    from brokerd.remoting.codec import FrameDecoder, encode, encode_binary
    from brokerd.remoting.connection import Connection, Dispatcher

    d = Dispatcher("fuzz")
    called: list[int] = []
    d.register(code, lambda conn, cmd: called.append(cmd.code))  # type: ignore[arg-type,return-value]
    d.guard = AclGuard(SAMPLE)
    conn = Connection(d)
    tr = _Transport()
    conn.connection_made(tr)  # type: ignore[arg-type]
    cmd = RemotingCommand(code, opaque=7, ext={k: v for k, v in ext.items() if k and v}, body=body or None)
    frame = encode_binary(cmd) if binary else encode(cmd)
    conn.data_received(frame[:5])
    conn.data_received(frame[5:])
    answers = FrameDecoder().feed(tr.out)
    assert not called and not tr.closed
    assert [a.code for a in answers] == [16] and answers[0].opaque == 7
