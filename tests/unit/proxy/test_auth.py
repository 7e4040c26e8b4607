"""ACL for gRPC clients: the SDKs' authorization header checked against plain_acl.yml accounts (signature over
x-mq-date-time), white addresses, and the permission each RPC needs, as RocketMQ's ACL reads gRPC requests."""

from __future__ import annotations

import pytest

from brokerd.acl.address import parse_address_pattern
from brokerd.acl.perm import DENY, PUB, SUB
from brokerd.acl.plain import Account, PlainAcl
from brokerd.proxy import pb
from brokerd.proxy.auth import authenticate, authorize, needed_perms, parse_authorization, signature_of
from brokerd.proxy.codes import Code, ProxyError

DT = "20261127T135800Z"
SDK_SIG = "89457e7d538991d7eb9318d56de65b6f54d314b9"  # the Python SDK 5.1.2's Signature.sign("12345678", DT)


def acl() -> PlainAcl:
    user = Account("RocketMQ", "12345678", default_topic_perm=DENY, default_group_perm=SUB,
                   topic_perms={"topicB": PUB | SUB, "topicC": SUB}, group_perms={"groupA": DENY})
    admin = Account("rocketmq2", "87654321", admin=True)
    white = Account("whiteuser", "abcdefgh", white=parse_address_pattern("10.1.1.1"))
    return PlainAcl({a.access_key: a for a in (user, admin, white)})


def header(ak: str, sig: str) -> str:
    return f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"


def test_the_signature_is_hmac_sha1_of_the_date_time_as_the_sdks_compute_it() -> None:
    assert signature_of(DT, "12345678").lower() == SDK_SIG
    acct, white = authenticate(acl(), header("RocketMQ", SDK_SIG), DT, "127.0.0.1")
    assert acct is not None and acct.access_key == "RocketMQ" and not white
    assert parse_authorization(header("AK", "00ff")) == ("AK", "00ff")


@pytest.mark.parametrize("auth,dt,why", [
    (None, DT, "No accessKey"), (header("Nobody", "00"), DT, "No acl config for Nobody"),
    (header("RocketMQ", "00" * 20), DT, "Check signature failed"), (header("RocketMQ", SDK_SIG), "20261127T135801Z",
                                                                    "Check signature failed"),
    (header("RocketMQ", SDK_SIG), None, "datetime is null"), ("garbage", DT, "authentication header is incorrect")])
def test_unsigned_unknown_or_wrongly_signed_requests_are_unauthorized(auth: str | None, dt: str | None, why: str) -> None:
    with pytest.raises(ProxyError) as e:
        authenticate(acl(), auth, dt, "127.0.0.1")
    assert e.value.code == Code.UNAUTHORIZED and why in e.value.message


def test_an_accounts_white_address_needs_no_signature() -> None:
    acct, white = authenticate(acl(), header("whiteuser", "bad"), None, "10.1.1.1")
    assert acct is not None and white


def send(topic: str) -> object:
    return pb.request_class("SendMessage")(messages=[pb.Message(topic=pb.Resource(name=topic), body=b"x")])


def test_each_rpc_needs_the_perms_rocketmq_asks_for() -> None:
    assert needed_perms("SendMessage", send("topicB")) == {"topicB": PUB}
    recv = pb.request_class("ReceiveMessage")(group=pb.Resource(name="g"),
                                              message_queue=pb.MessageQueue(topic=pb.Resource(name="t")))
    assert needed_perms("ReceiveMessage", recv) == {"%RETRY%g": SUB, "t": SUB}
    hb = pb.request_class("Heartbeat")(client_type=3)
    with pytest.raises(ProxyError):
        needed_perms("Heartbeat", hb)
    settings = pb.TelemetryCommand(settings=pb.Settings(publishing={"topics": [pb.Resource(name="topicC")]}))
    assert needed_perms("Telemetry", settings) == {"topicC": PUB}


def test_a_user_without_the_perm_is_forbidden_and_an_admin_is_not() -> None:
    a = acl()
    authorize(a.accounts["RocketMQ"], False, "SendMessage", send("topicB"))
    with pytest.raises(ProxyError) as e:
        authorize(a.accounts["RocketMQ"], False, "SendMessage", send("topicC"))
    assert e.value.code == Code.FORBIDDEN and "topic:topicC" in e.value.message
    authorize(a.accounts["rocketmq2"], False, "SendMessage", send("topicC"))
