"""ACL on (aclEnable=true, RocketMQ's sample plain_acl.yml) for 5.x clients of the gRPC endpoint: the Python and
Java SDKs signing with Credentials(ak, sk) produce and consume; an unsigned or wrongly signed client, and a
signed one without the permission, are refused with the proto's codes and store nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from brokerd.proxy import pb
from brokerd.proxy.auth import signature_of
from brokerd.proxy.codes import Code
from tests.integration.test_grpc_endpoint import Raw, message
from tests.integration.test_grpc_sdk import rows_of, run_java, run_python  # noqa: F401 - shared runners
from tests.support import ACL_ADMIN, ACL_USER, Cluster, acl_cluster, free_port

pytestmark = pytest.mark.integration

USER, ADMIN = ACL_USER, ACL_ADMIN


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("grpcacl")
    port = free_port()
    c = acl_cluster(tmp, enableGrpcProxy="true", grpcListenPort=port)
    c.grpc = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield c
    assert c.stop() == 0, c.daemon.output()[-3000:] if c.daemon else ""


class Signed(Raw):
    def __init__(self, addr: str, ak: str | None, sk: str) -> None:
        super().__init__(addr, client_id=f"raw-acl-{ak}")
        self.ak, self.sk = ak, sk

    def metadata(self) -> list[tuple[str, str]]:
        md = super().metadata()
        if self.ak is not None:
            dt = dict(md)["x-mq-date-time"]
            md.append(("authorization", f"MQv2-HMAC-SHA1 Credential={self.ak}, SignedHeaders=x-mq-date-time, "
                                        f"Signature={signature_of(dt, self.sk)}"))
        return md


async def send_as(cluster: Cluster, ak: str | None, sk: str, topic: str) -> Any:
    c = Signed(cluster.grpc, ak, sk)  # type: ignore[attr-defined]
    try:
        return await c.call("SendMessage", pb.request_class("SendMessage")(messages=[message(topic, 1)]))
    finally:
        await c.close()


async def test_unsigned_wrongly_signed_and_unpermitted_requests_get_the_protos_codes(cluster: Cluster) -> None:
    unsigned = await send_as(cluster, None, "", "topicB")
    assert unsigned.status.code == Code.UNAUTHORIZED and "No accessKey" in unsigned.status.message
    wrong = await send_as(cluster, USER[0], "not-the-secret", "topicB")
    assert wrong.status.code == Code.UNAUTHORIZED and "signature" in wrong.status.message
    unknown = await send_as(cluster, "Nobody", "12345678", "topicB")
    assert unknown.status.code == Code.UNAUTHORIZED
    denied = await send_as(cluster, USER[0], USER[1], "topicA")
    assert denied.status.code == Code.FORBIDDEN and "topic:topicA" in denied.status.message
    ok = await send_as(cluster, USER[0], USER[1], "topicB")
    assert ok.status.code == Code.OK, ok.status


def test_signed_sdks_produce_and_consume_and_unsigned_ones_are_refused(cluster: Cluster) -> None:
    ep = cluster.grpc  # type: ignore[attr-defined]
    steps: list[dict[str, Any]] = [{"op": "producer", "topics": ["topicB"]}, {"op": "send", "topic": "topicB", "count": 3, "prefix": "py"},
             {"op": "simple", "group": "groupB", "topic": "topicB"}, {"op": "receive", "count": 4, "timeout": 30}]
    signed = {"ACCESS_KEY": USER[0], "SECRET_KEY": USER[1]}
    rows = run_python(ep, steps, env=signed)
    assert sum(1 for r in rows if "sent" in r) == 3
    java = run_java(ep, ["producer,topic=topicB", "send,topic=topicB,count=1,start=9,prefix=java"],
                    env=signed)
    assert [r["sent"] for r in java if "sent" in r] == [9]
    got = run_python(ep, [{"op": "simple", "group": "groupB", "topic": "topicB"},
                          {"op": "receive", "count": 1, "timeout": 20}], env=signed)
    bodies = {r["recv"]["body"] for r in rows + got if "recv" in r}
    assert {"py-0", "py-1", "py-2", "java-9"} <= bodies, bodies
    t0 = time.monotonic()
    for creds in ({}, {"ACCESS_KEY": USER[0], "SECRET_KEY": "wrong-secret"}):
        bad = run_python(ep, [{"op": "producer", "topics": ["topicB"]},
                              {"op": "send", "topic": "topicB", "count": 1, "prefix": "refused"}], allow_fail=True,
                         env=creds)
        assert not [r for r in bad if "sent" in r], bad
    assert time.monotonic() - t0 < 120
    after = run_python(ep, [{"op": "simple", "group": "groupB", "topic": "topicB"},
                            {"op": "receive", "count": 1, "timeout": 6}], env=signed)
    assert not [r for r in after if "recv" in r and r["recv"]["body"].startswith("refused")]
