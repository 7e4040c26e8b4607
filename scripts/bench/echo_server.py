"""A bare uvloop echo server: the floor under the latency benchmarks (scripts/bench/latency.py).

No remoting stack: an asyncio.Protocol on uvloop that cuts the frames of each read, finds each request's opaque
(a JSON header's ``"opaque":N``, a ROCKETMQ binary header's int32) and answers a fixed send-response-shaped JSON
header with it, every answer of a read in one write. It is what the same machine and interpreter answer at the
least cost per request, with the same loop, sockets and clients as the broker. Usage: echo_server.py PORT
"""

from __future__ import annotations

import asyncio
import re
import sys

import uvloop

_OPAQUE = re.compile(rb'"opaque"\s*:\s*(-?\d+)')
_HEAD = (b'{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000000000","queueId":"0","queueOffset":"0",'
         b'"MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"flag":1,"language":"JAVA","opaque":%d,'
         b'"serializeTypeCurrentRPC":"JSON","version":0}')


def answer(opaque: int) -> bytes:
    head = _HEAD % opaque
    return (len(head) + 4).to_bytes(4, "big") + len(head).to_bytes(4, "big") + head


class Echo(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.rest = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.rest + data if self.rest else data
        pos, n, out = 0, len(buf), []
        while n - pos >= 8:
            total = int.from_bytes(buf[pos:pos + 4], "big")
            if n - pos - 4 < total:
                break
            mark = int.from_bytes(buf[pos + 4:pos + 8], "big")
            head = pos + 8
            if mark >> 24 == 0:  # JSON header
                m = _OPAQUE.search(buf, head, head + (mark & 0xFFFFFF))
                opaque = int(m.group(1)) if m else 0
            else:  # ROCKETMQ binary: code (2), language (1), version (2), opaque (4)
                opaque = int.from_bytes(buf[head + 5:head + 9], "big", signed=True)
            out.append(answer(opaque))
            pos += 4 + total
        self.rest = buf[pos:]
        if out and self.transport is not None:
            self.transport.writelines(out)


async def main(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", port, reuse_address=True)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.install()
    asyncio.run(main(int(sys.argv[1])))
