"""``podmand health``: ask a running podmand's gRPC health service (for HEALTHCHECK)."""

from __future__ import annotations

import argparse
import sys

from ..config import driver_socket

SERVICE = "openshell.compute.v1.ComputeDriver"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("health", help="exit 0 when a podmand answers SERVING on its socket")
    p.add_argument("--socket", help="driver socket (default: OPENSHELL_COMPUTE_DRIVER_SOCKET or the default path)")
    p.add_argument("--timeout", type=float, default=3.0)


def run(args: argparse.Namespace) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    path = driver_socket(args.socket)
    with grpc.insecure_channel(f"unix://{path}") as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=SERVICE), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            from .unreachable import message

            text = message(path, exc.code().name, exc.details() or "")
            print(f"podmand health: {text if path in text else f'{path}: {text}'}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    print(f"{path}: {status}")
    return 0 if answer.status == health_pb2.HealthCheckResponse.SERVING else 1
