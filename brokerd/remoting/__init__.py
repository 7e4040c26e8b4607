"""RocketMQ remoting wire layer: sans-I/O codec plus thin asyncio server/client."""

from brokerd.remoting.client import RemotingClient, split_addr
from brokerd.remoting.codec import FrameDecoder, FrameError, decode_payload, encode, encode_binary
from brokerd.remoting.codes import CURRENT_VERSION, RequestCode, ResponseCode
from brokerd.remoting.command import HeaderError, RemotingCommand, request
from brokerd.remoting.connection import Connection, ConnectionClosed, Dispatcher, RemotingTimeout
from brokerd.remoting.server import RemotingServer

__all__ = [
    "CURRENT_VERSION", "Connection", "ConnectionClosed", "Dispatcher", "FrameDecoder", "FrameError", "HeaderError",
    "RemotingClient", "RemotingCommand", "RemotingServer", "RemotingTimeout", "RequestCode", "ResponseCode",
    "decode_payload", "encode", "encode_binary", "request", "split_addr",
]
