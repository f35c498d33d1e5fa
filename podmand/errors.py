"""podmand's error types, and where each kind of error stops: one boundary per layer.

- **libpod client** (Podman's REST API): ``PodmanUnavailable`` when Podman cannot be
  reached or the connection broke, ``PodmanError`` when it answered with an error
  status, ``PodmanUnreadable`` when its answer does not decode. Nothing lower (socket
  errors, HTTP parsing, JSON decoding) is meant to leave the client.
- **driver and its parts** (spec, admission, identity, tokens, rootfs,
  cdi, ...): ``DriverError`` subclasses below, each naming the gRPC status it means.
  Podman errors pass through the driver unchanged, but for those an RPC words itself:
  a start Podman refused (``startstop``) and a stop or removal Podman failed in its
  network teardown, asked again and then ``Unavailable`` (``driver/teardown.py``).
  Errors that only describe an input to their caller (``SpecError``, ``ProxyFileError``,
  ``AuthFileError``, ``PullStalled``, ``ProvisionFailed``) are translated by that caller and cross no layer.
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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc


class StartupError(Exception):
    """podmand cannot start; the message says why (``podmand: <message>``, exit 1; a
    ``ConfigError``: exit 2)."""


class ConfigError(StartupError):
    """A setting is invalid; the message names it (``config.invalid`` words it)."""


class _Status:
    """A ``DriverError`` class's gRPC status, named here and looked up in grpc when read:
    the tools import this module (``StartupError``) and never answer gRPC, so they need
    not load grpc (a third of ``--version``'s imports)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> grpc.StatusCode:
        import grpc  # read by the servicer, which has grpc loaded long before

        return grpc.StatusCode[self.name]


class DriverError(Exception):
    code = _Status("INTERNAL")

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(DriverError):
    code = _Status("INVALID_ARGUMENT")


class FailedPrecondition(DriverError):
    code = _Status("FAILED_PRECONDITION")


class NotFound(DriverError):
    code = _Status("NOT_FOUND")


class AlreadyExists(DriverError):
    code = _Status("ALREADY_EXISTS")


class Unavailable(DriverError):
    code = _Status("UNAVAILABLE")


class Unimplemented(DriverError):
    code = _Status("UNIMPLEMENTED")

