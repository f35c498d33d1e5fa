"""podmand's error types, and where each kind of error stops: one boundary per layer.

- **libpod client** (Podman's REST API): ``PodmanUnavailable`` when Podman cannot be
  reached or the connection broke, ``PodmanError`` when it answered with an error
  status, ``PodmanUnreadable`` when its answer does not decode. Nothing lower (socket
  errors, HTTP parsing, JSON decoding) is meant to leave the client.
- **driver and its parts** (spec, admission, identity, tokens, credentials, rootfs,
  cdi, ...): ``DriverError`` subclasses below, each naming the gRPC status it means.
  Podman errors pass through the driver unchanged. Errors that only describe an
  input to their caller (``BadCredential``, ``SpecError``, ``ProxyFileError``,
  ``AuthFileError``, ``PullStalled``, ``ProvisionFailed``) are translated by that
  caller and cross no layer.
- **hub**: ends watch streams with a status of its own (``streams.End``); it never raises
  into a stream.
- **servicer** (the gRPC edge): ``servicer.status_of`` is the one mapping. A
  ``DriverError`` answers with its code and message, ``PodmanUnavailable`` with
  UNAVAILABLE, ``PodmanError`` and ``PodmanUnreadable`` with INTERNAL; anything else is a bug, answered
  INTERNAL with a fixed message and logged with its traceback. Requests that do not
  decode are refused INVALID_ARGUMENT before they reach it (``decoding.py``).
- **start-up** (``podmand serve`` until it is ready): ``StartupError`` and its
  subclasses (``ConfigError``, ``AutostartError``, ``NoPodmanSocket``,
  ``RuntimeDirError``, ``SocketError``, ``StateDirError``). The server turns the
  ``DriverError`` and Podman errors it meets while starting into one too.
  ``__main__`` prints each as ``podmand: <message>`` and exits 1 (2 for a
  ``ConfigError``: a setting is wrong); anything else is a bug, logged with its
  traceback.
- **ctl, health, doctor**: clients of the driver socket or of Podman; their own
  messages and exit statuses (``cli/unreachable.py``).
"""

from __future__ import annotations

import grpc


class StartupError(Exception):
    """podmand cannot start; the message says why (``podmand: <message>``, exit 1; a
    ``ConfigError``: exit 2)."""


class ConfigError(StartupError):
    """A setting is invalid; the message names it (``config.invalid`` words it)."""


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
