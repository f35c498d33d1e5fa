"""Driver errors carry their gRPC status code; the servicer only translates."""

from __future__ import annotations

import grpc


class DriverError(Exception):
    code = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(DriverError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPrecondition(DriverError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class NotFound(DriverError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(DriverError):
    code = grpc.StatusCode.ALREADY_EXISTS


class Unavailable(DriverError):
    code = grpc.StatusCode.UNAVAILABLE


class Unimplemented(DriverError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Unauthenticated(DriverError):
    code = grpc.StatusCode.UNAUTHENTICATED
