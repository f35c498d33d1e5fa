"""The operator's corporate proxy: its settings, checked at start, and what the
supervisor is given for them.

The proxy reaches the supervisor only on its command line (its ``--upstream-proxy*``
flags have no environment fallback), so neither the image's ``ENV`` nor the
caller's environment can change or disable it; the conventional ``HTTPS_PROXY``
family stays the sandbox's own business (and out of the supervisor's environment,
see ``sandboxenv.unsafe_env_key``). The credential travels as a root-only file in the
sandbox's state directory, never in env, labels or argv; the CA bundle as a
read-only copy beside it. Both are read from the operator's paths again for each
container, so a rotated credential applies to the next sandbox.

Rules and messages are upstream's (V1 driver and supervisor, with PR #2512):
``http://`` or ``https://`` proxies, scheme and port explicit, no inline credentials,
the credential's cleartext Basic auth acknowledged for an ``http://`` proxy only (to
an ``https://`` one it travels inside TLS), no auxiliary setting without a proxy, and
a CA bundle whose PEM blocks hold at least one certificate that parses as X.509.
OpenSSL parses them (the stdlib ``ssl`` module), so no dependency is added.
"""

from __future__ import annotations

import ipaddress
import os
import re
import ssl
import stat

from ..config import Settings, invalid

AUTH_PATH = "/etc/openshell/auth/upstream-proxy"
CA_BUNDLE_PATH = "/etc/openshell/tls/proxy/ca-bundle.pem"
AUTH_FILE = "upstream-proxy"  # names in the sandbox's state directory
CA_FILE = "proxy-ca-bundle.pem"
MAX_CREDENTIAL_BYTES = 4096
MAX_CA_BUNDLE_BYTES = 1024 * 1024
# Rust's str::trim (Unicode White_Space), which the supervisor applies; Python's
# str.strip() would also eat the separators U+001C..U+001F.
_WHITE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_FORBIDDEN_HOST = re.compile(r"[\x00-\x20#%/:<>?@\[\\\]^|\x7f]")
_PEM_CERT = b"-----BEGIN CERTIFICATE-----"
_PEM_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", re.DOTALL)
SCHEMES = ("http", "https")


class ProxyFileError(Exception):
    """An operator proxy file cannot be used; the message never holds its content."""


def trim(text: str) -> str:
    return text.strip(_WHITE_SPACE)


def _os_error(exc: OSError) -> str:
    """Rust's io::Error text, as upstream's messages carry it."""
    return f"{exc.strerror} (os error {exc.errno})" if exc.errno else str(exc)


def url_problem(raw: str) -> str | None:
    """Why ``raw`` is not an ``http://host:port`` proxy URL (upstream's words), or None.

    The checks run in upstream's order: the URL parser's own errors, then the
    scheme, inline credentials, the host, path, query, fragment and the port."""
    text = trim(raw)
    if not text:
        return "proxy URL is empty"
    if "://" not in text:
        return "proxy URL must include an explicit scheme, e.g. http://proxy.corp.com:3128"
    scheme, _, rest = text.partition("://")
    if not _SCHEME.fullmatch(scheme):
        return "not a valid proxy URL: relative URL without a base"
    end = len(rest)
    for mark in "/?#":
        if mark in rest:
            end = min(end, rest.index(mark))
    authority, tail = rest[:end], rest[end:]
    userinfo, _, host_port = authority.rpartition("@")
    host, port = _split_port(host_port)
    problem = _host_problem(host) or _port_problem(port)
    if problem:
        return f"not a valid proxy URL: {problem}"
    if scheme.lower() not in SCHEMES:
        return (
            f"unsupported proxy scheme '{scheme.lower()}': only http:// and https:// forward proxies are "
            "supported by the sandbox supervisor"
        )
    if userinfo:
        return "proxy URL must not embed credentials; supply them via the proxy auth file"
    path, query, fragment = _components(tail)
    for name, present in (("path", path not in ("", "/")), ("query", query), ("fragment", fragment)):
        if present:
            return f"proxy URL must not contain a {name}; use scheme://host:port only"
    if not port:
        return "proxy URL must include an explicit proxy port, e.g. http://proxy.corp.com:3128"
    if int(port) == 0:
        return "proxy URL port must not be 0"
    return None


def _split_port(host_port: str) -> tuple[str, str]:
    if host_port.startswith("["):
        close = host_port.find("]")
        if close < 0:
            return host_port, ""
        return host_port[: close + 1], host_port[close + 1 :].removeprefix(":")
    host, _, port = host_port.partition(":")
    return host, port


def _host_problem(host: str) -> str | None:
    if not host:
        return "empty host"
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1] if host.endswith("]") else "?")
        except ValueError:
            return "invalid IPv6 address"
        return None
    if _FORBIDDEN_HOST.search(host):
        return "invalid domain character"
    return None


def _port_problem(port: str) -> str | None:
    if port and (not port.isascii() or not port.isdigit() or int(port) > 65535):
        return "invalid port number"
    return None


def _components(tail: str) -> tuple[str, bool, bool]:
    """(path, has a query, has a fragment) of what follows the authority."""
    before_fragment, hash_mark, _ = tail.partition("#")
    path, question_mark, _ = before_fragment.partition("?")
    return path, bool(question_mark), bool(hash_mark)


def credential_problem(raw: str) -> str | None:
    """Why the auth file's content is not a usable ``user:pass`` (never quoting it), or None."""
    credential = trim(raw)
    if not credential:
        return "credential is empty"
    if _CONTROL.search(credential):
        return "credential contains control characters"
    user, sep, _ = credential.partition(":")
    if not sep:
        return "credential must use the user:pass form (missing ':')"
    if not user:
        return "credential must use the user:pass form (empty user)"
    return None


def _read_bounded(path: str, limit: int, what: str, unreadable: str) -> bytes:
    """A regular file's bytes, at most ``limit``; FIFOs and devices are refused without
    blocking. ``unreadable`` words a failed open ({err}: the OS error)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ProxyFileError(unreadable.replace("{err}", _os_error(exc))) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ProxyFileError(f"{what} '{path}' is not a regular file")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ProxyFileError(f"{what} '{path}' exceeds the {limit}-byte limit")
    return data


def read_credential(path: str) -> bytes:
    """The auth file's credential as the sandbox gets it: trimmed, with one newline."""
    data = _read_bounded(
        path, MAX_CREDENTIAL_BYTES, "proxy auth file", f"failed to open proxy auth file '{path}': {{err}}"
    )
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ProxyFileError(f"failed to read proxy auth file '{path}': stream did not contain valid UTF-8") from None
    problem = credential_problem(text)
    if problem:
        raise ProxyFileError(f"proxy_auth_file '{path}': {problem}")
    return trim(text).encode() + b"\n"


def secure(url: str) -> bool:
    """The (valid) proxy URL is ``https://``: the supervisor wraps its connection to the proxy in TLS."""
    return trim(url).lower().startswith("https://")


def trust_anchors(pem: bytes) -> list[bytes]:
    """The DER of each PEM certificate block that OpenSSL parses as X.509; the rest are
    skipped, as upstream's rustls store skips unparsable ones."""
    anchors = []
    for block in _PEM_BLOCK.findall(pem):
        try:
            der = ssl.PEM_cert_to_DER_cert(block.decode("ascii"))
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=der)
        except (ValueError, UnicodeDecodeError, ssl.SSLError):
            continue
        anchors.append(der)
    return anchors


def read_ca_bundle(path: str) -> bytes:
    """The PEM bundle, refused when empty, without a certificate block, or when no block parses
    as an X.509 certificate (the supervisor would refuse each)."""
    data = _read_bounded(
        path, MAX_CA_BUNDLE_BYTES, "proxy_ca_bundle", f"proxy_ca_bundle '{path}' could not be read: {{err}}"
    )
    if not data.strip():
        raise ProxyFileError(f"proxy_ca_bundle '{path}' is empty")
    if _PEM_CERT not in data:
        raise ProxyFileError(f"proxy_ca_bundle '{path}' contains no PEM certificate blocks")
    if not trust_anchors(data):
        raise ProxyFileError(
            f"proxy_ca_bundle '{path}' contains no usable trust anchors (PEM blocks were found but none "
            "contain valid X.509 DER)"
        )
    return data


def read_files(s: Settings) -> tuple[bytes | None, bytes | None]:
    """(credential file content, CA bundle) for one sandbox, read now from the operator's paths."""
    auth = read_credential(s.proxy_auth_file) if s.proxy_auth_file else None
    ca_bundle = read_ca_bundle(s.proxy_ca_bundle) if s.proxy_ca_bundle else None
    return auth, ca_bundle


def supervisor_args(s: Settings) -> list[str]:
    """The supervisor's proxy flags; ``--flag=value`` so that no value can read as a flag."""
    if s.https_proxy is None:
        return []
    args = [f"--upstream-proxy={trim(s.https_proxy)}"]
    if s.no_proxy is not None:
        args.append(f"--upstream-no-proxy={trim(s.no_proxy)}")
    if s.proxy_auth_file:
        args.append(f"--upstream-proxy-auth-file={AUTH_PATH}")
    if s.proxy_auth_allow_insecure:
        args.append("--upstream-proxy-auth-allow-insecure")
    if s.proxy_connect_by_hostname:
        args.append("--upstream-proxy-connect-by-hostname")
    if s.proxy_ca_bundle:
        args.append(f"--upstream-proxy-ca-bundle={CA_BUNDLE_PATH}")
    return args


def validate(s: Settings) -> None:
    """Refuse proxy settings upstream refuses, with its messages, and unusable files."""

    proxy = s.https_proxy
    if proxy is not None:
        problem = url_problem(proxy)
        if problem == "proxy URL is empty":
            raise invalid("https_proxy", "https_proxy must not be empty when set")
        if problem and problem.startswith("proxy URL must not embed credentials"):
            raise invalid(
                "https_proxy",
                "https_proxy must not embed credentials in the URL; supply them via proxy_auth_file so they "
                "are not stored in config or container metadata",
            )
        if problem:
            raise invalid("https_proxy", f"https_proxy {problem}")
    if s.no_proxy is not None:
        if not trim(s.no_proxy):
            raise invalid("no_proxy", "no_proxy must not be empty when set; omit it instead")
        if proxy is None:
            raise invalid("no_proxy", "no_proxy is set but no https_proxy is configured")
    if s.proxy_auth_file is not None:
        if not trim(s.proxy_auth_file):
            raise invalid("proxy_auth_file", "proxy_auth_file must not be empty when set")
        if proxy is None:
            raise invalid("proxy_auth_file", "proxy_auth_file is set but no https_proxy is configured")
        if not s.proxy_auth_allow_insecure and not secure(proxy):
            raise invalid(
                "proxy_auth_file",
                "proxy_auth_file sends the credential as cleartext Basic auth over the plain-TCP connection to "
                "the http:// proxy; set proxy_auth_allow_insecure = true to accept that exposure, or remove "
                "proxy_auth_file",
            )
    elif s.proxy_auth_allow_insecure:
        raise invalid(
            "proxy_auth_allow_insecure", "proxy_auth_allow_insecure is set but no proxy_auth_file is configured"
        )
    if s.proxy_connect_by_hostname and proxy is None:
        raise invalid("proxy_connect_by_hostname", "proxy_connect_by_hostname is set but no https_proxy is configured")
    if s.proxy_ca_bundle is not None:
        if not trim(s.proxy_ca_bundle):
            raise invalid("proxy_ca_bundle", "proxy_ca_bundle must not be empty when set")
        if proxy is None:
            raise invalid("proxy_ca_bundle", "proxy_ca_bundle is set but no https_proxy is configured")
    # What every sandbox would fail on: say so now (each container reads the files again).
    for field, read in (("proxy_auth_file", read_credential), ("proxy_ca_bundle", read_ca_bundle)):
        path = getattr(s, field)
        if path:
            try:
                read(path)
            except ProxyFileError as exc:
                raise invalid(field, str(exc)) from None
