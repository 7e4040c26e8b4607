"""The Python transport ceiling: a remoting server (same codec and server as the broker) whose only processor
parses each frame and answers success with a send-response-shaped header. Usage: ceiling_server.py PORT"""

from __future__ import annotations

import asyncio
import sys

import uvloop

from brokerd.remoting import Connection, Dispatcher, RemotingCommand, RemotingServer


def ok(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ext={"msgId": "7F00000100002A9F0000000000000000", "queueId": cmd.ext.get("e", "0"),
                             "queueOffset": "0", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})


async def main(port: int) -> None:
    d = Dispatcher("ceiling")
    d.default = ok
    srv = RemotingServer(d, host="127.0.0.1", port=port)
    await srv.start()
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.install()
    asyncio.run(main(int(sys.argv[1])))
