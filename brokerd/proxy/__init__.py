"""RocketMQ 5's gRPC endpoint (``apache.rocketmq.v2.MessagingService``, the proxy) for the brokers of a container
and, through the name server and remoting, for brokers elsewhere. It reaches brokers only with RocketMQ remoting
commands: in-process to a local broker's dispatcher (a send's frame through the broker's C send lane first), over
TCP to any other (``transport.py``).

Served by grpcio (``grpc.aio``) on the container's loop (``service.py``), and optionally by ``grpcWorkers`` worker
processes on the same port (SO_REUSEPORT, ``workers.py`` / ``worker.py``): each is the same endpoint in cluster
mode (brokers over TCP), so grpcio's per-call work, which one interpreter does on one core at a time, spreads over
cores; their counters and clients are added to the container's. What a call costs, and what bounds it:
scripts/bench/grpc.py (with the grpcio floor, scripts/bench/grpc_floor.py).
"""

from brokerd.proxy.config import GrpcProxyConfig
from brokerd.proxy.service import GrpcEndpoint
from brokerd.proxy.transport import LocalTargets

__all__ = ["GrpcEndpoint", "GrpcProxyConfig", "LocalTargets"]
