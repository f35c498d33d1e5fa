"""The runtime stand-in (tests/images/runtime/openshell-sandbox) against §7.1 and §8.3 of the
Sandbox Protocol contract: each start-up check refuses what the real ``openshell-sandbox``
refuses, with one error line and a non-zero exit, before it listens; every call's bearer is
checked; the protocol's order holds. Real processes on this host (tests/standin/split.py),
no podmand."""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.standin.launch import BOOTSTRAP, Launch, Tls
from tests.standin.split import Client, Pair
from tests.wait import wait_until

Doc = dict[str, Any]


def edit(change: Callable[[Doc], object]) -> Callable[[Launch], Doc]:
    def make(launch: Launch) -> Doc:
        doc = launch.bootstrap()
        change(doc)
        return doc
    return make


def put(path: str, value: Any) -> Callable[[Doc], None]:
    """Set (or with ``...`` delete) a member of the bootstrap by a /-separated path."""
    def change(doc: Doc) -> None:
        *parents, last = path.split("/")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if value is ...:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


def ec_public_pem() -> str:
    return ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


# ------------------------------------------------------------------ argv

ARGV = [
    pytest.param([], "the following required arguments were not provided: --bootstrap", id="no-bootstrap"),
    pytest.param(["--bootstrap"], "a value is required for '--bootstrap'", id="bootstrap-without-value"),
    pytest.param(["--bootstrap", BOOTSTRAP, "--timeout", "5"], "unexpected argument '--timeout' found",
                 id="unknown-flag"),
    pytest.param(["--bootstrap", BOOTSTRAP, f"--bootstrap={BOOTSTRAP}"], "cannot be used multiple times", id="twice"),
    pytest.param(["launch-capability-free", "1000", "1000"], "requires <UID> <GID> <BOOTSTRAP>", id="launcher-short"),
    pytest.param(["launch-capability-free", "1", "1", BOOTSTRAP, "/sandbox", "x"], "at most 4 arguments",
                 id="launcher-five"),
    pytest.param(["launch-capability-free", "abc", "1", BOOTSTRAP], "invalid UID 'abc'", id="launcher-uid-text"),
]


@pytest.mark.parametrize(("args", "message"), ARGV)
def test_argv_is_refused(pair: Pair, args: list[str], message: str) -> None:
    pair.write()
    pair.runtime(args).refused(message, code=2)
    assert (pair.sandbox / "bootstrap.json").exists()


def test_launcher_refuses_root_target(pair: Pair) -> None:
    pair.write()
    pair.runtime(["launch-capability-free", "0", "41000", BOOTSTRAP]).refused(
        "launch-capability-free requires a non-root UID and GID")


def test_launcher_must_start_as_root(pair: Pair) -> None:
    pair.write()
    pair.runtime(["launch-capability-free", "41000", "41000", BOOTSTRAP, "/sandbox"]).refused(
        "launch-capability-free must start as root")


# ------------------------------------------------------------------ qualification (before the bootstrap)

QUALIFY = [
    pytest.param({"uid": 0, "gid": 0}, "sandbox runtime must not run as root", id="uid-0"),
    pytest.param({"gid": 0}, "sandbox runtime must not run as root (euid 41000, egid 0)", id="gid-0"),
    pytest.param({"bounding": "-all,+net_bind_service"}, "must run without capabilities; non-zero masks: bounding=",
                 id="capability-left"),
    pytest.param({"nnp": False}, "requires no_new_privileges", id="no-nnp"),
    pytest.param({"port_start": 1024}, "ip_unprivileged_port_start must be 0 for the DNS relay, found 1024",
                 id="sysctl"),
    pytest.param({"net_setup": "ip link add standin0 type veth peer name standin1\n"},
                 "network namespace must have only lo, found lo, standin0, standin1", id="extra-interface"),
    pytest.param({"net_setup": "ip addr flush dev lo\n"},
                 "bind the DNS relay address 127.0.0.53:53 (TCP): Cannot assign requested address", id="no-loopback"),
]


@pytest.mark.parametrize(("options", "message"), QUALIFY)
def test_qualification_refuses(pair: Pair, options: dict[str, Any], message: str) -> None:
    pair.write()
    pair.runtime(**options).refused(message)
    assert (pair.sandbox / "bootstrap.json").exists(), "refused before the bootstrap is read"
    assert not pair.socket.exists()


# ------------------------------------------------------------------ the bootstrap, decoded strictly

def duplicate_field(launch: Launch) -> bytes:
    text = json.dumps(launch.bootstrap())
    return ('{"boundary_id": "other", ' + text[1:]).encode()


BOOTSTRAPS = [
    pytest.param(lambda launch: b"{", "decode bootstrap:", id="not-json"),
    pytest.param(edit(put("extra", 1)), "bootstrap: unknown field `extra`", id="unknown-field"),
    pytest.param(edit(put("listener/extra", 1)), "bootstrap.listener: unknown field `extra`", id="unknown-in-listener"),
    pytest.param(edit(put("listener/tls/extra", 1)), "bootstrap.listener.tls: unknown field `extra`",
                 id="unknown-in-listener-tls"),
    pytest.param(edit(put("verification_keys/0/extra", 1)), "bootstrap.verification_keys[]: unknown field `extra`",
                 id="unknown-in-key"),
    pytest.param(edit(put("workload_identity/extra", 1)), "bootstrap.workload_identity: unknown field `extra`",
                 id="unknown-in-identity"),
    pytest.param(edit(put("outer_fence/extra", 1)), "bootstrap.outer_fence: unknown field `extra`",
                 id="unknown-in-fence"),
    pytest.param(edit(put("outer_fence", ...)), "bootstrap: missing field `outer_fence`", id="missing-field"),
    pytest.param(duplicate_field, "duplicate field `boundary_id`", id="duplicate-field"),
    pytest.param(edit(put("auth_epoch", "1")), "bootstrap.auth_epoch: expected an integer", id="epoch-text"),
    pytest.param(edit(put("auth_epoch", 0)), "bootstrap.auth_epoch: expected an integer in 1..", id="epoch-0"),
    pytest.param(edit(put("session_rotation", 0)), "bootstrap.session_rotation: expected an integer in 1..",
                 id="rotation-0"),
    pytest.param(edit(put("session_id", "not-a-uuid")), "bootstrap.session_id: expected a canonical UUID",
                 id="session-not-uuid"),
    pytest.param(edit(put("listener/kind", "tcp")), "unknown variant `tcp`", id="listener-kind"),
    pytest.param(edit(put("child_env", {"A": 1})), "bootstrap.child_env: expected an object of strings",
                 id="child-env-type"),
    # validate_config
    pytest.param(edit(put("boundary_id", "")), "bootstrap boundary_id must not be empty", id="empty-boundary"),
    pytest.param(edit(put("generation", "")), "bootstrap generation must not be empty", id="empty-generation"),
    pytest.param(edit(put("gateway_id", "gw test")), "gateway ID is invalid", id="gateway-id-space"),
    pytest.param(edit(put("verification_keys", [])), "at least one verification key is required", id="no-keys"),
    pytest.param(edit(put("verification_keys/0/public_key_pem", "-----BEGIN PUBLIC KEY-----\nAAAA\n")),
                 "Ed25519 verification key 'kid-1' is invalid", id="key-garbage"),
    pytest.param(lambda launch: edit(put("verification_keys/0/public_key_pem", ec_public_pem()))(launch),
                 "is invalid (not Ed25519)", id="key-not-ed25519"),
    pytest.param(edit(lambda d: d["verification_keys"].append(dict(d["verification_keys"][0]))),
                 "verification key IDs must be unique", id="key-ids-duplicate"),
    pytest.param(edit(put("verification_keys/0/key_id", " kid")), "key ID is invalid", id="key-id-space"),
    pytest.param(edit(put("resource_claims/podman.container_id", "a b")), "must be non-empty and contain no whitespace",
                 id="claim-whitespace"),
    pytest.param(edit(lambda d: d["outer_fence"]["established"].pop()),
                 "outer fence guarantees are incomplete or bound to another generation", id="fence-incomplete"),
    pytest.param(edit(put("outer_fence/generation", "other")),
                 "outer fence guarantees are incomplete or bound to another generation", id="fence-generation"),
    pytest.param(edit(put("outer_fence/evidence_digest", "XYZ")), "evidence_digest: expected 64 lowercase hex",
                 id="fence-digest"),
    pytest.param(edit(put("resource_claim_files", {"unknown.claim": "/etc/hostname"})),
                 "resource claim file for unknown claim 'unknown.claim'", id="claim-file-unknown"),
    pytest.param(edit(put("resource_claim_files", {"podman.container_id": "relative"})),
                 "must be an absolute path", id="claim-file-relative"),
    pytest.param(edit(put("resource_claim_files", {"podman.container_id": "/etc/hostname"})),
                 "resource claim 'podman.container_id' does not match its claim file /etc/hostname",
                 id="claim-file-mismatch"),
    pytest.param(edit(put("listener/socket_path", "control.sock")),
                 "boundary control Unix socket path must be absolute",
                 id="socket-relative"),
    pytest.param(edit(put("listener/tls/certificate_chain_path", "server.crt")),
                 "boundary TLS certificate chain path must be absolute", id="cert-relative"),
    pytest.param(edit(put("workload_identity/uid", 0)), "workload identity must not contain UID or GID zero",
                 id="identity-uid-0"),
    pytest.param(edit(put("workload_identity/supplementary_gids", [0])),
                 "workload identity must not contain UID or GID zero", id="identity-group-0"),
    pytest.param(edit(put("listener", {"kind": "tls-tcp", "address": "0.0.0.0:9000",
                                       "tls": {"certificate_chain_path": "/a", "private_key_path": "/b"}})),
                 "the stand-in serves only a unix listener", id="tls-tcp-listener"),
    pytest.param(edit(put("listener", {"kind": "vsock", "control_port": 0,
                                       "tls": {"certificate_chain_path": "/a", "private_key_path": "/b"}})),
                 "boundary control port must be nonzero", id="vsock-port-0"),
]


@pytest.mark.parametrize(("make", "message"), BOOTSTRAPS)
def test_bootstrap_is_refused(pair: Pair, make: Callable[[Launch], Doc | bytes], message: str) -> None:
    bootstrap = make(pair.launch)
    pair.write(bootstrap=bootstrap)
    pair.runtime().refused(message)
    assert (pair.sandbox / "bootstrap.json").exists(), "a refused bootstrap is not consumed"
    assert not pair.socket.exists(), "nothing listens"


def test_claim_file_that_matches_is_accepted(pair: Pair) -> None:
    claim = pair.channel / "container-id"
    claim.write_text(pair.launch.container_id + "\n")
    os.chmod(claim, 0o644)
    pair.write(bootstrap=edit(put("resource_claim_files",
                                  {"podman.container_id": "/.openshell/channel/container-id"}))(pair.launch))
    pair.listening(pair.runtime())


# ------------------------------------------------------------------ the measured identity

def test_uid_other_than_the_identity_is_refused(pair: Pair) -> None:
    pair.write(bootstrap=edit(put("workload_identity/uid", 41001))(pair.launch))
    pair.runtime().refused("sandbox runtime identity mismatch: uids 41000/41000/41000 (real/effective/saved), "
                           "workload identity uid 41001")


def test_gid_other_than_the_identity_is_refused(pair: Pair) -> None:
    pair.write(bootstrap=edit(put("workload_identity/gid", 41001))(pair.launch))
    pair.runtime().refused("gids 41000/41000/41000 (real/effective/saved), workload identity gid 41001")


def test_extra_supplementary_group_is_refused(pair: Pair) -> None:
    pair.write()
    pair.runtime(groups=[5000]).refused("supplementary groups [5000], workload identity []")


@pytest.mark.parametrize("claim", ["openshell.identity.allow_extra_supplementary_groups", "openshell.gpu"])
def test_extra_supplementary_group_is_allowed_by_a_claim(pair: Pair, claim: str) -> None:
    bootstrap = edit(put(f"resource_claims/{claim}", "true"))(pair.launch)
    pair.write(bootstrap=bootstrap)
    runtime = pair.runtime(groups=[5000])
    pair.listening(runtime)
    assert "supplementary groups [5000] extend [] (allowed by a resource claim)" in runtime.log


def test_missing_supplementary_group_is_refused_even_with_the_claim(pair: Pair) -> None:
    bootstrap = edit(put("resource_claims/openshell.gpu", "true"))(pair.launch)
    bootstrap["workload_identity"]["supplementary_gids"] = [5000]
    pair.write(bootstrap=bootstrap)
    pair.runtime().refused("supplementary groups [], workload identity [5000]")


# ------------------------------------------------------------------ consuming the bootstrap, the listener

def test_bootstrap_that_cannot_be_unlinked_is_fatal(pair: Pair) -> None:
    pair.write()
    os.chown(pair.sandbox, 0, 0)        # 0711 root: the identity reads its files but cannot unlink them
    runtime = pair.runtime()
    runtime.refused("consume bootstrap /.openshell/channel/sandbox/bootstrap.json: Permission denied")
    assert not pair.socket.exists()


def test_mismatched_tls_key_is_refused(pair: Pair) -> None:
    pair.write()
    pair.put(pair.sandbox / "server.key", Tls.make(pair.launch.server_name).key_pem)
    pair.runtime().refused("load the boundary TLS server certificate and key")


def test_something_else_at_the_socket_path_is_refused(pair: Pair) -> None:
    pair.write()
    pair.socket.mkdir()
    pair.runtime().refused("/.openshell/channel/sandbox/control.sock exists and is not a stale socket of this runtime")


def test_stale_socket_of_the_runtime_is_replaced(pair: Pair) -> None:
    pair.write()
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(pair.socket))
    os.chown(pair.socket, pair.launch.uid, pair.launch.gid)
    pair.listening(pair.runtime())
    assert pair.socket.is_socket()


def test_listens_0666_after_consuming_the_bootstrap(pair: Pair) -> None:
    pair.write()
    runtime = pair.runtime()
    pair.listening(runtime)
    assert not (pair.sandbox / "bootstrap.json").exists()
    st = pair.socket.stat()
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o666, pair.launch.uid, pair.launch.gid)
    steps = [line.split(": ", 1)[1].split(":")[0] for line in runtime.log.splitlines()]
    assert steps[:3] == ["qualified", "bootstrap accepted", "bootstrap consumed"], runtime.log
    assert steps[3].startswith("listening on /.openshell/channel/sandbox/control.sock (mode 0666"), runtime.log


# ------------------------------------------------------------------ signals

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_before_confirmation_exits_non_zero_with_the_marker(pair: Pair, sig: signal.Signals) -> None:
    pair.write()
    runtime = pair.runtime()
    pair.listening(runtime)
    runtime.proc.send_signal(sig)
    assert runtime.wait() == 1
    assert f"sandbox boundary received {sig.name} before supervisor confirmation" in runtime.log


def test_sigterm_after_confirmation_shuts_down_cleanly(pair: Pair) -> None:
    pair.write()
    runtime = pair.runtime()
    pair.listening(runtime)
    client = Client(pair)
    try:
        assert client.attach()["result"] == "attached"
        assert client.call({"operation": "confirm"})["result"] == "confirmed"
    finally:
        client.close()
    runtime.proc.send_signal(signal.SIGTERM)
    assert runtime.wait() == 0, runtime.log
    assert "received SIGTERM after confirmation: shutting down" in runtime.log


# ------------------------------------------------------------------ the bearer of every call (§8.3)

@pytest.fixture(scope="module")
def serving(rootfs: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pair, Client]]:
    """One runtime for the bearer cases: a refused call leaves it serving."""
    tmp = tmp_path_factory.mktemp("bearer")
    os.chmod(tmp, 0o755)
    p = Pair(rootfs, tmp, Launch())
    p.write()
    p.listening(p.runtime())
    client = Client(p)
    yield p, client
    client.close()
    p.close()


def token(**kw: Any) -> Callable[[Launch], str]:
    return lambda launch: launch.token(**kw)


def now() -> int:
    return int(time.time())


BEARERS = [
    pytest.param(lambda launch: [], "authorization metadata is missing", id="missing"),
    pytest.param(lambda launch: [("authorization", f"Bearer {launch.token()}")] * 2,
                 "authorization metadata must occur exactly once", id="duplicated"),
    pytest.param(lambda launch: [("authorization", f"Basic {launch.token()}")],
                 "authorization metadata is not a valid bearer credential", id="not-bearer"),
    pytest.param(lambda launch: [("authorization", "Bearer ")],
                 "authorization metadata is not a valid bearer credential", id="empty-bearer"),
    pytest.param(token(key=Ed25519PrivateKey.generate()), "sandbox JWT validation failed: session token is invalid",
                 id="wrong-key"),
    pytest.param(token(header={"kid": "kid-2"}), "session token key ID is unknown", id="unknown-kid"),
    pytest.param(token(header={"kid": None}), "session token key ID is missing", id="no-kid"),
    pytest.param(token(profile="gateway", aud="openshell-sandbox"), "session token type is invalid",
                 id="gateway-typ"),
    pytest.param(token(header={"alg": "HS256"}), "session token algorithm must be EdDSA", id="wrong-alg"),
    pytest.param(token(iss="openshell-gateway:other"), "session token issuer is invalid", id="wrong-issuer"),
    pytest.param(token(aud="openshell-gateway:gw-test"), "session token audience is invalid", id="wrong-audience"),
    pytest.param(token(sub="spiffe://openshell/sandbox/other"), "session token subject does not match its sandbox ID",
                 id="subject-mismatch"),
    pytest.param(token(jti="not-a-uuid"), "session token ID is not a UUID", id="jti-not-uuid"),
    pytest.param(lambda launch: launch.token(iat=now() + 600, exp=now() + 1200),
                 "session token was issued in the future",
                 id="issued-in-future"),
    pytest.param(lambda launch: launch.token(iat=now() - 7200, exp=now() - 3600), "session token has expired",
                 id="expired"),
    pytest.param(lambda launch: launch.token(iat=now(), exp=now() + 7200), "session token lifetime must be",
                 id="lifetime-too-long"),
    pytest.param(token(extra="x"), "session token is invalid", id="unknown-claim"),
    pytest.param(token(component="openshell-gateway"), "session token is invalid", id="wrong-component"),
    pytest.param(token(sandbox_id="sb-other", sub="spiffe://openshell/sandbox/sb-other"),
                 "authenticated sandbox identity does not match this runtime", id="wrong-sandbox"),
    pytest.param(token(runtime_generation="g-other"),
                 "authenticated runtime generation does not match this sandbox runtime", id="wrong-generation"),
    pytest.param(token(auth_epoch=2), "Sandbox Protocol credential epoch is stale", id="other-epoch"),
]


@pytest.mark.parametrize(("make", "message"), BEARERS)
def test_bearer_is_refused(serving: tuple[Pair, Client], make: Callable[[Launch], Any], message: str) -> None:
    pair, client = serving
    made = make(pair.launch)
    metadata = made if isinstance(made, list) else [("authorization", f"Bearer {made}")]
    with pytest.raises(grpc.RpcError) as refused:
        client.call({"operation": "discover_policy"}, metadata=metadata)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert message in (refused.value.details() or "")
    # and the runtime still serves a good bearer
    assert client.call({"operation": "discover_policy"})["result"] == "image_policy"


# ------------------------------------------------------------------ the protocol's order (§8.3, §8.5)

@pytest.fixture
def client(pair: Pair) -> Iterator[Client]:
    pair.write()
    pair.listening(pair.runtime())
    c = Client(pair)
    yield c
    c.close()


START = {"operation": "start_agent", "sandbox_id": "sb-standin",
         "spec": {"program": "/bin/true", "args": [], "workdir": None, "timeout_secs": 0, "interactive": False},
         "policy": {"version": 1, "read_only": [], "read_write": [], "include_workdir": True, "network": "block",
                    "proxy_addr": None, "landlock": "best_effort", "run_as_user": None, "run_as_group": None},
         "ca_cert": None, "ca_bundle": None, "provider_env_revision": 0, "provider_env": {}, "provider_files": {}}


def test_confirm_before_attach_is_denied(client: Client) -> None:
    response = client.call({"operation": "confirm"})
    assert response == {"result": "error", "kind": "denied",
                        "message": "Sandbox Protocol connection has not completed attach"}


def test_start_agent_before_confirm_is_denied(client: Client) -> None:
    assert client.attach()["result"] == "attached"
    response = client.call(START)
    assert response == {"result": "error", "kind": "denied",
                        "message": "Sandbox Protocol connection has not completed attach"}


def test_a_second_supervisor_instance_is_denied(client: Client) -> None:
    assert client.attach()["result"] == "attached"
    response = client.attach()
    assert response["message"] == "sandbox runtime is already bound to another supervisor process"


def test_attach_with_other_resource_claims_is_denied(client: Client) -> None:
    request = {"operation": "attach", "supervisor_instance_id": str(uuid.uuid4()), "policy": START["policy"],
               "resource_claims": {"podman.container_id": "other"}}
    assert client.call(request)["message"] == "attach resource claims do not match the boundary's resource claims"


def test_payload_digest_must_match(client: Client) -> None:
    response = client.call({"operation": "discover_policy"}, payload_digest="0" * 64)
    assert response["message"] == "request payload digest does not match the request"


def test_replayed_mutation_returns_the_recorded_answer(client: Client) -> None:
    request = {"operation": "attach", "supervisor_instance_id": str(uuid.uuid4()), "policy": START["policy"],
               "resource_claims": client.launch.claims()}
    request_id = str(uuid.uuid4())
    first = client.call(request, request_id=request_id)
    assert client.call(request, request_id=request_id) == first
    changed = copy.deepcopy(request)
    changed["supervisor_instance_id"] = str(uuid.uuid4())
    assert client.call(changed, request_id=request_id)["message"] == (
        "request payload digest does not match the recorded request")


def test_oversized_control_frame_is_refused(client: Client) -> None:
    body = (2 * 1024 * 1024).to_bytes(4, "big") + b"{}"
    answer = client.raw(body, [("authorization", f"Bearer {client.launch.token()}")])
    assert answer["response"]["message"] == f"control frame of {2 * 1024 * 1024} bytes exceeds 1048576"


def test_start_agent_for_another_sandbox_is_denied(client: Client) -> None:
    client.attach()
    client.call({"operation": "confirm"})
    response = client.call({**START, "sandbox_id": "sb-other"})
    assert response["message"] == "start_agent sandbox_id does not match this boundary"


def test_descendant_of_the_runtime_is_refused(client: Client, pair: Pair) -> None:
    """The main process (a descendant) dials the control socket: the runtime drops it before TLS."""
    probe = ("import socket,ssl\n"
             "s=socket.socket(socket.AF_UNIX); s.connect('/.openshell/channel/sandbox/control.sock')\n"
             "c=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT); c.check_hostname=False; c.verify_mode=ssl.CERT_NONE\n"
             "try:\n c.wrap_socket(s); r='handshake completed'\n"
             "except (OSError, ssl.SSLError) as e: r='refused: %s' % e\n"
             "open('/sandbox/descendant.txt','w').write(r)\n")
    client.attach()
    client.call({"operation": "confirm"})
    start = {**START, "spec": {**START["spec"], "program": "/usr/bin/python3", "args": ["-c", probe]}}
    assert client.call(start)["result"] == "started"
    result = pair.workspace / "descendant.txt"
    wait_until(result.exists, 20, "the main process's probe")
    assert result.read_text().startswith("refused"), result.read_text()
    log = pair.sides[0].log
    assert "a descendant of the runtime (EACCES)" in log


@pytest.mark.parametrize(("tls12", "alpn", "logged"), [
    pytest.param(True, ["h2"], "TLS handshake with a control client failed", id="tls-1.2"),
    pytest.param(False, ["http/1.1"], "refused a control connection: TLSv1.3 ALPN None", id="no-h2"),
])
def test_control_socket_takes_only_tls13_with_h2(client: Client, pair: Pair, tls12: bool, alpn: list[str],
                                                 logged: str) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=pair.launch.tls.anchor_pem)
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(alpn)
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(10)
        raw.connect(str(pair.socket))
        name = pair.launch.server_name
        with pytest.raises((ssl.SSLError, OSError)), ctx.wrap_socket(raw, server_hostname=name) as tls:
            tls.sendall(b"PRI * HTTP/2.0\r\n\r\n")
            if not tls.recv(1):
                raise OSError("closed by the runtime")
    wait_until(lambda: logged in pair.sides[0].log, 10, repr(logged), lambda: pair.sides[0].log)


def test_second_connection_while_the_first_is_active_is_unavailable(client: Client, pair: Pair) -> None:
    instance = str(uuid.uuid4())
    assert client.attach(instance)["result"] == "attached"
    assert client.call({"operation": "confirm"})["result"] == "confirmed"
    other = Client(pair)
    try:
        response = other.attach(instance)
        assert response == {"result": "error", "kind": "unavailable", "message":
                             "another Sandbox Protocol connection with this credential epoch is still active"}
        assert other.call({"operation": "wait", "process_id": "main"})["message"] == (
            "Sandbox Protocol connection has not completed attach")
    finally:
        other.close()
