"""The supervisor stand-in (tests/images/supervisor2/openshell-supervisor) against §7.2 of the
Sandbox Protocol contract, run beside the runtime stand-in as real processes on this host
(tests/standin/split.py), no podmand: the happy path end to end (attach, confirm,
start_agent, the main process as the identity, the health socket), and each check refusing
what the real ``openshell-supervisor`` refuses, with one error line and a non-zero exit."""

from __future__ import annotations

import copy
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.standin.launch import Launch, Tls
from tests.standin.split import SUPERVISOR_ARGS, Pair, Side
from tests.wait import wait_until

Doc = dict[str, Any]
DESCRIPTOR_FLAG = "--backend-descriptor-file=/.openshell/supervisor/runtime-descriptor.json"
AUTH_FLAG = "--auth-bundle-file=/.openshell/supervisor/auth.json"
# the main process records what it is and sees, waits for the test, then exits 3
PROBE = ("import json,os,time\n"
         "status=dict(l.split(':\\t',1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
         "json.dump({'uid':os.getresuid(),'gid':os.getresgid(),'groups':os.getgroups(),'cwd':os.getcwd(),"
         "'env':dict(e.split('=',1) for e in open('/proc/self/environ').read().split('\\0') if e),"
         "'caps':[status[k].strip() for k in ('CapInh','CapPrm','CapEff','CapBnd','CapAmb')],"
         "'nnp':status['NoNewPrivs'].strip()},open('/sandbox/probe.json','w'))\n"
         "while not os.path.exists('/sandbox/release'): time.sleep(0.05)\n"
         "raise SystemExit(3)\n")


def start_pair(pair: Pair, *, runtime_env: dict[str, str] | None = None, runtime_groups: list[int] | None = None,
               **supervisor: Any) -> tuple[Side, Side]:
    runtime = pair.runtime(env=runtime_env, groups=runtime_groups)
    pair.listening(runtime)
    return runtime, pair.supervisor(**supervisor)


# ------------------------------------------------------------------ the happy path

def test_pair_attaches_confirms_starts_the_main_process_and_becomes_healthy(pair: Pair) -> None:
    pair.write()
    runtime, supervisor = start_pair(pair, command=["/usr/bin/python3", "-c", PROBE])
    supervisor.wait_for("openshell-supervisor: ready: health socket /run/openshell/supervisor-health.sock")
    steps = [line.split(": ", 2)[1].split(" ")[0] for line in supervisor.log.splitlines()
             if line.startswith("openshell-supervisor: ")]
    assert steps == ["auth", "descriptor", "TLS", "attached", "the", "confirmed", "started", "gateway", "ready"]
    assert pair.health().returncode == 0
    probe_file = pair.workspace / "probe.json"
    wait_until(probe_file.exists, 20, "the main process's probe")
    probe = json.loads(probe_file.read_text())
    uid, gid = pair.launch.uid, pair.launch.gid
    assert probe["uid"] == [uid] * 3 and probe["gid"] == [gid] * 3 and probe["groups"] == []
    assert probe["caps"] == ["0000000000000000"] * 5 and probe["nnp"] == "1"
    assert probe["cwd"] == "/sandbox"
    assert probe["env"] == pair.launch.child_env, "the main process gets child_env and nothing else"
    assert not (pair.sandbox / "bootstrap.json").exists()
    (pair.workspace / "release").touch()
    assert supervisor.wait() == 3, supervisor.log
    assert "main process exited: exited 3" in supervisor.log
    assert runtime.wait() == 3, runtime.log
    assert "boundary terminated by the supervisor" in runtime.log
    for side in (runtime, supervisor):
        assert pair.launch.auth()["sandbox_token"].split(".")[1] not in side.log
    assert pair.health().returncode == 1, "health fails once the supervisor is gone"


def test_health_needs_a_socket_that_accepts(pair: Pair) -> None:
    result = pair.health("/run/openshell/absent.sock")
    assert result.returncode == 1
    assert "health: /run/openshell/absent.sock: No such file or directory" in result.stderr


# ------------------------------------------------------------------ argv and the role

ARGV = [
    pytest.param([*SUPERVISOR_ARGS, "--bogus"], "unexpected argument '--bogus' found", 2, id="unknown-flag"),
    pytest.param([*SUPERVISOR_ARGS, "--workdir=/tmp"], "the argument '--workdir' cannot be used multiple times", 2,
                 id="twice"),
    pytest.param([*SUPERVISOR_ARGS, "--sandbox-id"], "a value is required for '--sandbox-id'", 2, id="no-value"),
    pytest.param(["--role", "bogus", *SUPERVISOR_ARGS], "invalid value 'bogus' for '--role <ROLE>'", 2,
                 id="role-unknown"),
    pytest.param([AUTH_FLAG], "--backend-descriptor-file is required for --role=isolation-backend", 1,
                 id="no-descriptor"),
    pytest.param([DESCRIPTOR_FLAG], "--auth-bundle-file is required for --role=isolation-backend", 1, id="no-auth"),
    pytest.param([*SUPERVISOR_ARGS, "--listen", "127.0.0.1:3128"], "--listen is only valid with --role=network-proxy",
                 1, id="listen"),
    pytest.param([*SUPERVISOR_ARGS, "--tls-dir", "/run/tls"], "--tls-dir is only valid with --role=network-proxy", 1,
                 id="tls-dir"),
    pytest.param(["--role=network-proxy"], "implements only --role=isolation-backend", 1, id="network-proxy"),
    pytest.param([*SUPERVISOR_ARGS, "--parent-liveness-fd", "2"], "parent liveness descriptor is invalid", 1,
                 id="liveness-fd-2"),
    pytest.param([*SUPERVISOR_ARGS, "--parent-liveness-fd", "97"], "parent liveness descriptor is not open", 1,
                 id="liveness-fd-closed"),
    pytest.param([*SUPERVISOR_ARGS, "--main-exit-marker", "marker"], "--main-exit-marker must be an absolute path", 1,
                 id="marker-relative"),
]


@pytest.mark.parametrize(("args", "message", "code"), ARGV)
def test_argv_is_refused(pair: Pair, args: list[str], message: str, code: int) -> None:
    pair.write()
    pair.supervisor(args).refused(message, code)


def test_parent_liveness_eof_exits(pair: Pair) -> None:
    pair.write()
    read_end, write_end = os.pipe()
    supervisor = pair.supervisor([*SUPERVISOR_ARGS, f"--parent-liveness-fd={read_end}"], pass_fds=[read_end])
    os.close(read_end)
    supervisor.wait_for("waiting for the sandbox runtime")
    os.close(write_end)
    assert supervisor.wait() == 1
    assert "parent liveness descriptor reached EOF: the owning driver exited" in supervisor.log


# ------------------------------------------------------------------ auth.json

def auth_edit(change: Callable[[Doc], object]) -> Callable[[Launch], Doc | bytes]:
    def make(launch: Launch) -> Doc:
        doc = launch.auth()
        change(doc)
        return doc
    return make


def setter(key: str, value: Any) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        if value is ...:
            del doc[key]
        else:
            doc[key] = value
    return change


AUTHS = [
    pytest.param(lambda launch: b"not json", "decode supervisor authentication bundle: decode", id="not-json"),
    pytest.param(auth_edit(setter("ssh_host_private_key", "-----BEGIN OPENSSH PRIVATE KEY-----")),
                 "unknown field `ssh_host_private_key`", id="unknown-field"),
    pytest.param(auth_edit(setter("sandbox_token", ...)), "missing field `sandbox_token`", id="missing-field"),
    pytest.param(auth_edit(setter("sandbox_token", "")), "sandbox_token: session token encoding is invalid",
                 id="empty-token"),
    pytest.param(auth_edit(lambda d: d.update(gateway_token=d["gateway_token"] + " x")),
                 "gateway_token: session token encoding is invalid", id="token-whitespace"),
    pytest.param(auth_edit(setter("session_id", "not-a-uuid")), "session_id: expected a canonical UUID",
                 id="session-not-uuid"),
    pytest.param(auth_edit(setter("auth_epoch", 0)), "credential epoch must be positive", id="epoch-0"),
    pytest.param(auth_edit(setter("session_rotation", 0)), "session rotation must be positive", id="rotation-0"),
    pytest.param(auth_edit(setter("gateway_expires_at", -1)),
                 "validate supervisor authentication bundle: session token lifetime", id="negative-expiry"),
    pytest.param(auth_edit(setter("runtime_generation", "Not-Valid")),
                 "validate supervisor authentication bundle: sandbox runtime identity is invalid",
                 id="generation-invalid"),
    pytest.param(auth_edit(setter("sandbox_expires_at", int(time.time()) - 10)),
                 "the Sandbox Protocol bearer is unavailable: session token has expired", id="sandbox-token-expired"),
]


@pytest.mark.parametrize(("make", "message"), AUTHS)
def test_auth_bundle_is_refused(pair: Pair, make: Callable[[Launch], Doc | bytes], message: str) -> None:
    pair.write(auth=make(pair.launch))
    pair.supervisor().refused(message)


def test_auth_bundle_it_cannot_read_is_refused(pair: Pair) -> None:
    pair.write()
    os.chown(pair.supdir / "auth.json", 0, 0)
    pair.supervisor().refused("read supervisor authentication bundle /.openshell/supervisor/auth.json: "
                              "Permission denied")


def test_newer_supervisor_takes_the_field_a_newer_gateway_adds(pair: Pair) -> None:
    """STANDIN_SUPERVISOR_AUTH_FIELDS makes the stand-in a supervisor that knows ssh_host_private_key:
    the bundle copied verbatim then works, and any other unknown field is still refused."""
    auth = pair.launch.auth()
    auth["ssh_host_private_key"] = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
    pair.write(auth=auth)
    newer = {"STANDIN_SUPERVISOR_AUTH_FIELDS": "ssh_host_private_key"}
    _, supervisor = start_pair(pair, env=newer)
    assert supervisor.wait() == 0, supervisor.log
    assert "confirmed" in supervisor.log
    auth["another_field"] = "x"
    pair.write(auth=auth)
    pair.supervisor(env=newer).refused("unknown field `another_field`")


# ------------------------------------------------------------------ the environment

def test_unregistered_admitted_backend_is_refused(pair: Pair) -> None:
    pair.write()
    pair.supervisor(env={"OPENSHELL_ADMITTED_ISOLATION_BACKEND": "ryno-sandbox"}).refused(
        "backend not registered: ryno-sandbox")


def test_missing_sandbox_id_is_refused(pair: Pair) -> None:
    pair.write()
    pair.supervisor(env={"OPENSHELL_SANDBOX_ID": None}).refused(  # type: ignore[dict-item]
        "the sandbox ID is required (--sandbox-id or OPENSHELL_SANDBOX_ID)")


@pytest.mark.parametrize(("spec", "message"), [
    ('{"version":2,"command":["true"]}', "unsupported OPENSHELL_MAIN_PROCESS_SPEC version 2"),
    ("{", "invalid OPENSHELL_MAIN_PROCESS_SPEC:"),
    ('{"version":1,"command":"true"}', "command must be a list of strings"),
])
def test_main_process_spec_is_refused(pair: Pair, spec: str, message: str) -> None:
    pair.write()
    pair.supervisor(env={"OPENSHELL_MAIN_PROCESS_SPEC": spec}).refused(message)


# ------------------------------------------------------------------ the runtime descriptor

def desc(change: Callable[[Doc], object]) -> Callable[[Launch], Doc]:
    def make(launch: Launch) -> Doc:
        doc = launch.descriptor()
        change(doc)
        return doc
    return make


def nested(*path: str, value: Any) -> Callable[[Doc], None]:
    def change(doc: Doc) -> None:
        node = doc
        for part in path[:-1]:
            node = node[part]
        if value is ...:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return change


DESCRIPTORS = [
    pytest.param(lambda launch: b"[]", "descriptor error: decode runtime descriptor: runtime descriptor: expected an "
                 "object", id="not-an-object"),
    pytest.param(desc(nested("extra", value=1)), "runtime descriptor: unknown field `extra`", id="unknown-field"),
    pytest.param(desc(nested("transport", "extra", value=1)), "transport: unknown field `extra`",
                 id="unknown-in-transport"),
    pytest.param(desc(nested("tls", "extra", value=1)), "tls: unknown field `extra`", id="unknown-in-tls"),
    pytest.param(desc(nested("workload_identity", "extra", value=1)), "workload_identity: unknown field `extra`",
                 id="unknown-in-identity"),
    pytest.param(desc(nested("outer_fence", value=...)), "missing field `outer_fence`", id="missing-fence"),
    pytest.param(desc(nested("host_gateway_ip", value="not-an-ip")), "host_gateway_ip: invalid IP address syntax",
                 id="host-gateway-ip"),
    pytest.param(desc(nested("boundary_id", value="sb-other")),
                 "descriptor error: boundary 'sb-other' does not match sandbox 'sb-standin'", id="boundary-mismatch"),
    pytest.param(desc(nested("generation", value="")), "descriptor error: boundary generation must not be empty",
                 id="empty-generation"),
    pytest.param(desc(nested("session_id", value=str(uuid.uuid4()))),
                 "runtime descriptor session ID does not match admitted sandbox session", id="session-mismatch"),
    pytest.param(desc(nested("workload_identity", "uid", value=41001)),
                 "runtime descriptor workload identity does not match admitted sandbox identity", id="identity-uid"),
    pytest.param(desc(nested("workload_identity", "supplementary_gids", value=[5000])),
                 "runtime descriptor workload identity does not match admitted sandbox identity",
                 id="identity-groups"),
    pytest.param(desc(nested("workload_identity", "gid", value=0)),
                 "workload identity must not contain UID or GID zero", id="identity-gid-0"),
    pytest.param(desc(nested("workload_identity", "source", value=" ")),
                 "workload identity source and resource digest are required", id="identity-source-blank"),
    pytest.param(desc(nested("resource_claims", "podman.container_id", value="")),
                 "boundary resource claim 'podman.container_id' must be non-empty", id="claim-empty"),
    pytest.param(desc(lambda d: d["outer_fence"]["established"].pop()),
                 "confirmation failed: outer fence guarantees are incomplete or bound to another generation",
                 id="fence-incomplete"),
    pytest.param(desc(nested("transport", "socket_path", value="control.sock")),
                 "boundary control Unix socket path must be absolute", id="socket-relative"),
    pytest.param(desc(nested("transport", value={"kind": "tcp", "authority": "", "addresses": []})),
                 "boundary TCP transport requires an authority and at least one address", id="tcp-empty"),
    pytest.param(desc(nested("transport", value={"kind": "vsock", "guest_cid": 2, "port": 9})),
                 "boundary CID must be at least 3", id="vsock-cid"),
    pytest.param(desc(nested("tls", "server_name", value="not a name")),
                 "boundary TLS server name 'not a name' is invalid", id="server-name-invalid"),
    pytest.param(desc(nested("tls", "trust_anchor_pem", value="no certificate here")),
                 "boundary TLS CA certificate", id="anchor-without-certificate"),
]


@pytest.mark.parametrize(("make", "message"), DESCRIPTORS)
def test_descriptor_is_refused(pair: Pair, make: Callable[[Launch], Doc | bytes], message: str) -> None:
    pair.write(descriptor=make(pair.launch))
    pair.supervisor().refused(message)


# ------------------------------------------------------------------ TLS and the bearer, against the runtime

def test_server_name_other_than_the_certificate_is_refused(pair: Pair) -> None:
    descriptor = pair.launch.descriptor()
    descriptor["tls"]["server_name"] = f"sandbox.{uuid.uuid4()}.openshell.internal"
    pair.write(descriptor=descriptor)
    _, supervisor = start_pair(pair)
    supervisor.refused("boundary unavailable: TLS handshake with /.openshell/channel/sandbox/control.sock as "
                       f"{descriptor['tls']['server_name']}: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
                       "failed: Hostname mismatch")


def test_anchor_other_than_the_issuer_is_refused(pair: Pair) -> None:
    descriptor = pair.launch.descriptor()
    descriptor["tls"]["trust_anchor_pem"] = Tls.make(pair.launch.server_name).anchor_pem
    pair.write(descriptor=descriptor)
    _, supervisor = start_pair(pair)
    supervisor.refused("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")


def test_absent_runtime_is_refused_after_the_connect_timeout(pair: Pair) -> None:
    pair.write()
    pair.supervisor(env={"STANDIN_SUPERVISOR_CONNECT_TIMEOUT": "1"}).refused(
        "boundary unavailable: connect /.openshell/channel/sandbox/control.sock: No such file or directory "
        "(waited 1 s)")


@pytest.mark.parametrize(("make", "message"), [
    pytest.param(lambda launch: launch.token(key=Ed25519PrivateKey.generate()),
                 "sandbox JWT validation failed: session token is invalid", id="wrong-key"),
    pytest.param(lambda launch: launch.token("gateway"), "sandbox JWT validation failed: session token type is invalid",
                 id="gateway-token"),
    pytest.param(lambda launch: launch.token(auth_epoch=2), "Sandbox Protocol credential epoch is stale",
                 id="other-epoch"),
    pytest.param(lambda launch: launch.token(runtime_generation="g-other"),
                 "authenticated runtime generation does not match this sandbox runtime", id="other-generation"),
])
def test_sandbox_token_the_runtime_refuses_stops_the_supervisor(pair: Pair, make: Callable[[Launch], str],
                                                                message: str) -> None:
    auth = pair.launch.auth()
    auth["sandbox_token"] = make(pair.launch)
    pair.write(auth=auth)
    runtime, supervisor = start_pair(pair)
    supervisor.refused(f"attachment failed: UNAUTHENTICATED: {message}")
    assert f"denied a call: {message}" in runtime.log
    assert runtime.proc.poll() is None, "the runtime keeps waiting for a supervisor it can trust"


# ------------------------------------------------------------------ attach and confirm (§7.2)

def other_generation(launch: Launch) -> Launch:
    """The same launch with another runtime generation (same keys, session and TLS)."""
    other = copy.copy(launch)
    other.generation = str(uuid.uuid4())
    return other


def test_snapshot_of_another_generation_is_refused(pair: Pair) -> None:
    runtime_side = other_generation(pair.launch)
    auth = pair.launch.auth()
    auth["sandbox_token"] = runtime_side.token()       # the runtime must let the call through
    pair.write(bootstrap=runtime_side.bootstrap(), auth=auth)
    _, supervisor = start_pair(pair)
    supervisor.refused("confirmation failed: sandbox session snapshot generation does not match runtime descriptor")


def test_attach_with_claims_the_runtime_does_not_hold_is_refused(pair: Pair) -> None:
    descriptor = pair.launch.descriptor()
    descriptor["resource_claims"]["podman.container_id"] = "0" * 64
    pair.write(descriptor=descriptor)
    _, supervisor = start_pair(pair)
    supervisor.refused("attachment failed: denied: attach resource claims do not match the boundary's resource claims")


MISMATCH = ("confirmation failed: sandbox confirmation generation, session, resource claims, or outer fence do not "
            "match runtime descriptor")


def bootstrap_edit(change: Callable[[Doc], object]) -> Callable[[Launch], Doc]:
    def make(launch: Launch) -> Doc:
        doc = launch.bootstrap()
        change(doc)
        return doc
    return make


@pytest.mark.parametrize(("make", "env", "message"), [
    pytest.param(bootstrap_edit(nested("session_id", value=str(uuid.uuid4()))), None, MISMATCH, id="session"),
    pytest.param(bootstrap_edit(nested("outer_fence", "evidence_digest", value="0" * 64)), None, MISMATCH,
                 id="fence"),
    pytest.param(None, {"STANDIN_RUNTIME_AUDIT_OVERRIDE": '{"landlock_abi": 2}'},
                 "confirmation failed: native Linux sandbox audit evidence is incomplete", id="audit-incomplete"),
    pytest.param(None, {"STANDIN_RUNTIME_AUDIT_OVERRIDE": '{"no_new_privileges": false}'},
                 "confirmation failed: native Linux sandbox audit evidence is incomplete", id="audit-nnp"),
    pytest.param(None, {"STANDIN_RUNTIME_AUDIT_OVERRIDE": '{"seccomp": {}}'},
                 "confirmation failed: decode native Linux sandbox audit evidence: seccomp", id="audit-undecodable"),
    pytest.param(None, {"STANDIN_RUNTIME_CONFIRMATION_OVERRIDE": json.dumps({"properties": {
        "filesystem_confinement": {"enforced": True, "mechanism": "landlock-v7"},
        "egress_interception": {"enforced": True, "mechanism": "seccomp-notify"},
        "request_attribution": {"enforced": True, "mechanism": "seccomp-notify-procfs"},
        "privilege_floor": {"enforced": True, "mechanism": "linux-capability-free"}}})},
        "confirmation failed: sandbox confirmation properties do not match native Linux audit evidence",
        id="properties"),
    pytest.param(None, {"STANDIN_RUNTIME_CONFIRMATION_OVERRIDE": '{"authenticated_supervisor": false}'},
                 "confirmation failed: boundary confirmation is incomplete or mismatched", id="unauthenticated"),
    pytest.param(None, {"STANDIN_RUNTIME_CONFIRMATION_OVERRIDE": '{"runtime_exit_terminates_workload": false}'},
                 "confirmation failed: boundary confirmation is incomplete or mismatched", id="runtime-exit"),
])
def test_confirmation_is_refused(pair: Pair, make: Callable[[Launch], Doc] | None, env: dict[str, str] | None,
                                 message: str) -> None:
    pair.write(bootstrap=make(pair.launch) if make else None)
    runtime, supervisor = start_pair(pair, runtime_env=env)
    supervisor.refused(message)
    assert "started the main process" not in runtime.log, "no StartAgent after a refused confirmation"


def test_confirmation_of_another_identity_is_refused(pair: Pair) -> None:
    """The runtime runs as (and its bootstrap names) the identity with group 5000; the supervisor
    runs as the descriptor's identity without it: the confirmed identity is not the admitted one."""
    bootstrap = pair.launch.bootstrap()
    bootstrap["workload_identity"]["supplementary_gids"] = [5000]
    pair.write(bootstrap=bootstrap)
    runtime, supervisor = start_pair(pair, runtime_groups=[5000])
    supervisor.refused("confirmation failed: boundary confirmation is incomplete or mismatched")
    assert "started the main process" not in runtime.log
