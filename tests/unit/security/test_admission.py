"""Unit tests for podmand.security.admission: the advertised policy is the enforced one."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from podmand import names, negotiation
from podmand._proto import compute_driver_pb2 as pb
from podmand.config import Settings
from podmand.driver import Driver
from podmand.errors import FailedPrecondition, InvalidArgument
from podmand.host import enforcement
from podmand.libpod import Info, PodmanClient, StoreInfo, VolumeInspect
from podmand.sandbox.driverconfig import Mount
from podmand.security import admission
from podmand.security.admission import Protected
from tests.fakes.harness import Containers, Rig, Sink, driver_on, eventually, labels_for, name_for
from tests.fakes.libpod import INFO, FakeLibpod, Hang, Request
from tests.jwt import make_launch

UPSTREAM_DEFAULT = (
    'v1:{"allow_driver_config":false,"resource_admission":{"enabled":true,"required_labels":'
    '{"openshell.ai/sandbox-attachable":"true","openshell.ai/workspace":"${workspace}"}}}'
)
ADMITTED = {"openshell.ai/sandbox-attachable": "true", "openshell.ai/workspace": "ws"}


def facts(labels: dict[str, str] | None = None, driver: str = "local", **options: str) -> VolumeInspect:
    return volume(labels, driver, options)


def volume(labels: dict[str, str] | None, driver: str, options: dict[str, str]) -> VolumeInspect:
    return VolumeInspect(name="data", driver=driver, labels=labels, options=options or None)


# ---------------------------------------------------------------- one source


@pytest.mark.parametrize(
    "settings",
    [
        Settings(),
        Settings(allow_driver_config=True, admission_enabled=False),
        Settings(admission_labels={"b": "2", "a": "${workspace}"}),
    ],
)
def test_advertised_string_is_the_checked_policy(settings: Settings) -> None:
    """GetCapabilities serialises the very Policy the checks read."""
    assert negotiation.admission_policy(settings) == admission.policy(settings).wire()
    caps = negotiation.capabilities(settings, limits=enforcement.BOTH)
    assert caps.resource_admission_policy == admission.policy(settings).wire()


def test_default_policy_is_upstreams_string() -> None:
    assert admission.policy(Settings()).wire() == UPSTREAM_DEFAULT


def test_workspace_substitution() -> None:
    pol = admission.policy(Settings())
    assert pol.labels_for("ws") == ADMITTED
    assert pol.labels_for("") is None  # upstream: invalid workspace identity
    fixed = admission.policy(Settings(admission_labels={"tier": "gold"}))
    assert fixed.labels_for("") == {"tier": "gold"}


# ---------------------------------------------------------------- named volumes


def test_labelled_volume_is_admitted() -> None:
    admission.check_volume(facts(ADMITTED), admission.policy(Settings(
            )), "ws", enable_bind_mounts=False,
                           protected=())


@pytest.mark.parametrize(
    ("labels", "workspace"),
    [
        (None, "ws"),
        ({"openshell.ai/sandbox-attachable": "true"}, "ws"),
        (ADMITTED, "other"),
        ({**ADMITTED, "openshell.ai/sandbox-attachable": "false"}, "ws"),
    ],
)
def test_unlabelled_or_foreign_volume_is_refused(labels: dict[str, str] | None, workspace: str) -> None:
    with pytest.raises(FailedPrecondition) as exc:
        admission.check_volume(facts(labels), admission.policy(Settings(
                )), workspace, enable_bind_mounts=False,
                               protected=())
    assert exc.value.message == "podman volume 'data': external resource not admitted by required labels"


def test_admission_disabled_checks_no_labels() -> None:
    admission.check_volume(facts(None), admission.policy(Settings(admission_enabled=False)), "ws",
                           enable_bind_mounts=False, protected=())


def test_empty_workspace_is_not_an_identity() -> None:
    with pytest.raises(FailedPrecondition) as exc:
        admission.check_volume(facts(ADMITTED), admission.policy(Settings(
                )), "", enable_bind_mounts=False,
                               protected=())
    assert "invalid workspace identity" in exc.value.message


@pytest.mark.parametrize(
    ("driver", "options", "host"),
    [
        ("local", {"type": "none", "o": "bind", "device": "/srv/data"}, "/srv/data"),
        ("", {"o": "rbind,ro", "device": "/srv"}, "/srv"),
        ("local", {"type": "ext4", "device": "/dev/sdb1"}, "/dev/sdb1"),
        ("local", {"type": "tmpfs", "device": "tmpfs", "o": "size=1m"}, None),
        ("local", {}, None),
        ("some-plugin", {"o": "bind", "device": "/srv"}, None),
    ],
)
def test_host_backed_volume_detection(driver: str, options: dict[str, str], host: str | None) -> None:
    assert admission.host_source(volume(None, driver, options)) == host


def test_bind_backed_volume_needs_enable_bind_mounts() -> None:
    """Labels do not make a hidden host bind acceptable; enable_bind_mounts does, outside podmand's paths."""
    bound = facts(ADMITTED, type="none", o="bind", device="/srv/data")
    pol = admission.policy(Settings())
    with pytest.raises(FailedPrecondition) as exc:
        admission.check_volume(bound, pol, "ws", enable_bind_mounts=False, protected=())
    assert "backed by a host bind mount" in exc.value.message and "enable_bind_mounts" in exc.value.message
    own = (Protected("/var/lib/podmand", "podmand's own state directory"),)
    admission.check_volume(bound, pol, "ws", enable_bind_mounts=True, protected=own)
    state = facts(ADMITTED, type="none", o="bind", device="/var/lib")
    with pytest.raises(FailedPrecondition) as exc:
        admission.check_volume(state, pol, "ws", enable_bind_mounts=True, protected=own)
    assert "podmand's own state directory (/var/lib/podmand)" in exc.value.message


# ---------------------------------------------------------------- host paths


@pytest.fixture
def tree() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="adm-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_podmands_own_paths_are_never_bind_sources(tree: Path) -> None:
    """The state dir, anything in it, any parent of it, and a symlink to it are refused."""
    state = tree / "state"
    (state / "sandboxes").mkdir(parents=True)
    (tree / "elsewhere").mkdir()
    os.symlink(state, tree / "link")
    own = admission.protected_paths(Settings(
            socket=str(tree / "run" / "d.sock")), str(state), "/run/p/podman.sock",
                                    env={"HOME": str(tree / "home")})
    paths = [p.path for p in own]
    assert str(state) in paths and str(tree / "run") in paths and "/run/p/podman.sock" in paths
    for source in (state, state / "sandboxes", tree, "/", tree / "link", tree / "link" / "sandboxes",
                   tree / "elsewhere" / ".." / "state", "/run/p"):
        with pytest.raises(FailedPrecondition) as exc:
            admission.check_host_path("m.source", str(source), own)
        assert exc.value.message.startswith("m.source:")
    admission.check_host_path("m.source", str(tree / "elsewhere"), own)


def test_operator_secrets_podmans_storage_and_registry_logins_are_protected(tree: Path) -> None:
    """Each protected path, a path inside it, its parent and a symlink to it are refused,
    naming what the path is; a path beside them all is not."""
    home, run, secrets = tree / "home", tree / "run" / "user", tree / "etc"
    for d in (home, run, secrets, tree / "staging", tree / "elsewhere"):
        d.mkdir(parents=True)
    settings = Settings(
            socket=str(tree / "sock" / "d.sock"), registry_auth_file=str(secrets / "auth.json"),
                        proxy_auth_file=str(secrets / "proxy-auth"), proxy_ca_bundle=str(secrets / "ca" / "p.pem"),
                        rootfs_staging_dir=str(tree / "staging"))
    store = tree / "storage"
    info = Info(store=StoreInfo(graphRoot=str(store / "graph"), runRoot=str(run / "containers"),
                                volumePath=str(tree / "volumes"), configFile=str(tree / "conf" / "storage.conf")))
    env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(run), "REGISTRY_AUTH_FILE": str(tree / "reg" / "auth.json"),
           "XDG_CONFIG_HOME": str(tree / "xdg")}
    own = admission.protected_paths(settings, str(tree / "state"), "/run/p/podman.sock",
                                    admission.podman_paths(info), env)
    cases = [
        (secrets / "auth.json", "the registry auth file (registry_auth_file)"),
        (secrets / "proxy-auth", "the proxy credential file (proxy_auth_file)"),
        (secrets / "ca", "the proxy CA bundle (proxy_ca_bundle)"),
        (tree / "staging" / "req-1", "the rootfs staging directory (rootfs_staging_dir)"),
        (store, "Podman's storage (graphRoot)"),
        (store / "graph" / "overlay", "Podman's storage (graphRoot)"),
        (run / "containers", "Podman's run root (runRoot)"),
        (tree / "volumes" / "other-tenant", "Podman's volume directory (volumePath)"),
        (tree / "conf", "Podman's containers config directory (storage.conf, auth.json)"),
        (tree / "reg", "the registry auth file $REGISTRY_AUTH_FILE names"),
        (tree / "xdg" / "containers" / "auth.json", admission.CONFIG_DIR),
        (home / ".config", admission.CONFIG_DIR),
        (home / ".docker", "Docker's registry auth file (~/.docker/config.json)"),
        (home, admission.CONFIG_DIR),
    ]
    os.symlink(store / "graph", tree / "elsewhere" / "innocent")
    cases.append((tree / "elsewhere" / "innocent", "Podman's storage (graphRoot)"))
    for source, role in cases:
        with pytest.raises(FailedPrecondition) as exc:
            admission.check_host_path("m.source", str(source), own)
        assert exc.value.message.startswith(f"m.source: {str(source)!r} would expose {role} ("), exc.value.message
    admission.check_host_path("m.source", str(tree / "elsewhere"), own)


def test_registry_logins_are_where_podman_looks() -> None:
    """containers-auth.json(5): $REGISTRY_AUTH_FILE, the runtime directory (or /run/containers/<uid>
    without one), the config home's containers directory, and Docker's config.json."""
    full = admission.registry_logins({"HOME": "/h", "XDG_RUNTIME_DIR": "/run/user/7", "REGISTRY_AUTH_FILE": "/a.json",
                                      "XDG_CONFIG_HOME": "/cfg"}, 7)
    assert [p.path for p in full] == ["/a.json", "/run/user/7/containers", "/cfg/containers",
                                      "/h/.config/containers", "/h/.docker/config.json"]
    bare = admission.registry_logins({"HOME": "/h"}, 7)
    assert [p.path for p in bare] == ["/run/containers/7", "/h/.config/containers", "/h/.config/containers",
                                      "/h/.docker/config.json"]


def test_podman_paths_from_info() -> None:
    info = Info(store=StoreInfo(graphRoot="/g", runRoot="/r", volumePath="/g/volumes",
                                configFile="/h/.config/containers/storage.conf"))
    assert [p.path for p in admission.podman_paths(info)] == ["/g", "/r", "/g/volumes", "/h/.config/containers"]
    # Podman 5.8 and later leave the file out (containers/podman#28083): rootful, its default
    # place stays protected; rootless, the user's config directory is (registry_logins)
    assert [(p.path, p.role) for p in admission.podman_paths(Info())] == [("/etc/containers", admission.CONFIG_DIR)]
    rootless = msgspec.convert({"host": {"security": {"rootless": True}}}, Info)
    assert admission.podman_paths(rootless) == ()


def test_provenance() -> None:
    strict, lenient = admission.policy(Settings()), admission.policy(Settings(
            allow_driver_config=True))
    admission.check_provenance(strict, "false")
    admission.check_provenance(lenient, "true")
    for pol, label in ((strict, "true"), (strict, None), (lenient, None), (lenient, "")):
        with pytest.raises(FailedPrecondition) as exc:
            admission.check_provenance(pol, label)
        assert exc.value.message == admission.PROVENANCE_REFUSED


# ---------------------------------------------------------------- through the driver, against a fake libpod


def run_driver(settings: Settings, state: Path, setup: Any, body: Any) -> FakeLibpod:
    """Run ``body(driver)`` with a driver whose Podman is a fresh fake (set up by ``setup``)."""
    sock = tempfile.mkdtemp(prefix="adm-", dir="/tmp") + "/p.sock"

    async def main() -> None:
        await fake.start(sock)
        client = PodmanClient(sock)
        try:
            await asyncio.wait_for(body(Driver(settings, client, state, Sink())), 10)
        finally:
            await client.close()
            await fake.close()

    fake = FakeLibpod()
    setup(fake)
    try:
        asyncio.run(main())
    finally:
        shutil.rmtree(os.path.dirname(sock), ignore_errors=True)
    return fake


@pytest.mark.parametrize("bad", ["..", ".", "../../x", "/etc", "abc\n", "a/b"])
def test_traversal_ids_never_reach_files_or_podman(bad: str, tree: Path) -> None:
    """Every RPC with a sandbox id checks it first: '..' once rmtree'd the whole state dir."""
    state = tree / "state"
    state.mkdir()
    (state / "keep").write_text("x")

    async def body(driver: Driver) -> None:
        for call in (driver.get(bad), driver.stop(bad), driver.start(bad), driver.delete(bad)):
            with pytest.raises(InvalidArgument) as exc:
                await call
            assert exc.value.message.startswith("sandbox_id:")

    fake = run_driver(Settings(), state, lambda fake: None, body)
    assert (state / "keep").read_text() == "x"
    assert fake.requests == []


def container(labels: dict[str, str], mounts: list[dict[str, str]]) -> Any:
    """sb1's pair, stopped: its workload has ``labels`` and ``mounts``."""
    def setup(fake: FakeLibpod) -> None:
        boxes = Containers(fake)
        workload = boxes.boxes[boxes.add_pair("sb1", "exited")]
        workload["Config"]["Labels"], workload["Mounts"] = labels, mounts
        fake.volumes["data"] = {"Name": "data", "Labels": {}}
        fake.volumes["good"] = {"Name": "good", "Labels": ADMITTED}
    return setup


BASE_LABELS = {**labels_for("sb1"), names.ISOLATION_ROLE: names.ROLE_WORKLOAD}
del BASE_LABELS[names.DRIVER_CONFIG_USED]  # each test says
BUNDLE = make_launch("sb1", "g0000000000000001")  # every start brings one
STARTED = rf"/containers/{name_for('sb1')}/start$"  # the workload's start (by name, as the pair's)


@pytest.mark.parametrize(
    ("labels", "mounts", "needle"),
    [
        ({names.DRIVER_CONFIG_USED: "true"}, [], "forbidden driver config"),
        ({}, [], "lacks admission provenance"),
        ({names.DRIVER_CONFIG_USED: "false"}, [{"Type": "volume", "Name": "data"}], "not admitted by required labels"),
    ],
)
def test_start_rechecks_admission_and_starts_nothing(
    labels: dict[str, str], mounts: list[dict[str, str]], needle: str, tree: Path
) -> None:
    async def body(driver: Driver) -> None:
        with pytest.raises(FailedPrecondition) as exc:
            await driver.start("sb1", launch_authentication=BUNDLE)
        assert needle in exc.value.message

    fake = run_driver(Settings(), tree / "state", container({**BASE_LABELS, **labels}, mounts), body)
    assert not [r for r in fake.requests if r.endswith("/start")]


def test_start_of_an_admitted_sandbox_goes_ahead(tree: Path) -> None:
    mounts = [{"Type": "volume", "Name": "good"}, {"Type": "volume", "Name": names.volume_name("sb1")}]

    async def body(driver: Driver) -> None:
        await driver.start("sb1", launch_authentication=BUNDLE)

    labels = {**BASE_LABELS, names.DRIVER_CONFIG_USED: "false"}
    fake = run_driver(Settings(), tree / "state", container(labels, mounts), body)
    assert [r for r in fake.requests if re.search(STARTED, r)]


def test_validate_checks_volumes_and_bind_sources(tree: Path) -> None:
    """ValidateSandboxCreate: the admission and own-path checks run before anything is made."""
    state = tree / "state"
    settings = Settings(allow_driver_config=True, enable_bind_mounts=True, admission_enabled=False)

    async def body(driver: Driver) -> None:
        own = await admission.protected(driver.podman, settings, str(state))
        with pytest.raises(FailedPrecondition) as exc:
            await admission.admit_mounts(driver.podman, settings, str(state), "ws", [Mount("bind", "/x", str(state))])
        assert exc.value.message.startswith("sandbox.spec.template.driver_config.mounts[0].source:")
        assert str(state) in [p.path for p in own]
        await admission.admit_mounts(driver.podman, settings, str(state), "ws", [Mount("volume", "/d", "data")])
        with pytest.raises(FailedPrecondition) as exc:
            await admission.admit_mounts(driver.podman, Settings(
                    ), str(state), "ws", [Mount("volume", "/d", "data")])
        assert exc.value.message == ("sandbox.spec.template.driver_config.mounts[0].source: podman volume 'data': "
                                     "external resource not admitted by required labels")
        with pytest.raises(FailedPrecondition) as exc:
            await admission.admit_mounts(driver.podman, settings, str(state), "ws", [Mount("volume", "/d", "gone")])
        assert "does not exist" in exc.value.message

    run_driver(settings, state, container({}, []), body)


STORE = {"graphRoot": "/srv/podman/graph", "runRoot": "/srv/podman/run", "volumePath": "/srv/podman/graph/volumes",
         "configFile": "/srv/podman/conf/storage.conf"}


def with_store(fake: FakeLibpod) -> None:
    fake.route("GET", "/info", (200, {}, {**INFO, "store": {**INFO["store"], **STORE}}))


def test_podmans_storage_comes_from_one_info_and_only_for_binds(tree: Path) -> None:
    """A bind into Podman's graphRoot is refused by what /info says; /info is asked once for
    the life of the client, and not at all for a request without binds or volumes."""
    state = tree / "state"
    settings = Settings(allow_driver_config=True, enable_bind_mounts=True, admission_enabled=False)

    fakes: list[FakeLibpod] = []

    def setup(fake: FakeLibpod) -> None:
        fakes.append(fake)
        with_store(fake)

    async def body(driver: Driver) -> None:
        [fake] = fakes
        await admission.admit_mounts(driver.podman, settings, str(state), "ws", [Mount("tmpfs", "/t")])
        assert fake.count(r"^GET \S*/info") == 0
        for source, role in (("/srv/podman/graph/overlay", "Podman's storage (graphRoot)"),
                             ("/srv/podman", "Podman's containers config directory"),  # the first it holds
                             ("/srv/podman/run", "Podman's run root (runRoot)"),
                             ("/srv/podman/conf/auth.json", "Podman's containers config directory")):
            with pytest.raises(FailedPrecondition) as exc:
                await admission.admit_mounts(driver.podman, settings, str(state), "ws", [Mount("bind", "/x", source)])
            assert exc.value.message.startswith(f"sandbox.spec.template.driver_config.mounts[0].source: "
                                                f"{source!r} would expose {role}"), exc.value.message
        await admission.admit_mounts(driver.podman, settings, str(state), "ws", [Mount("bind", "/x", "/srv/data")])
        assert fake.count(r"^GET \S*/info") == 1

    run_driver(settings, state, setup, body)


# ---------------------------------------------------------------- StartSandbox re-checks the binds


OPEN = Settings(allow_driver_config=True, enable_bind_mounts=True, admission_enabled=False)


def own_binds(state: Path) -> list[dict[str, str]]:
    """The binds podmand gives every workload (pair/specs.py: the runtime binary), as Podman's
    inspect shows them, and what a started image mount looks like: a bind from Podman's storage."""
    return [
        {"Type": "bind", "Source": str(state / "supervisor" / "sha256-x" / "openshell-sandbox"),
         "Destination": names.RUNTIME_BIN},
        {"Type": "volume", "Name": names.channel_volume_name("sb1"), "Destination": names.CHANNEL_DIR},
        {"Type": "image", "Source": "localhost/data:1", "Destination": "/img"},
        {"Type": "bind", "Source": "/srv/podman/graph/overlay-containers/c/userdata/overlay/1/merge",
         "Destination": "/img"},
        {"Type": "volume", "Name": names.volume_name("sb1"), "Destination": "/sandbox"},
    ]


def test_start_rechecks_bind_sources_with_symlinks_resolved_now(tree: Path) -> None:
    """A bind source that was a harmless directory at create and now leads into a protected
    path (here: through a symlink re-pointed at the state directory, or into Podman's
    storage) is refused at StartSandbox, naming the mount and the path's role, and nothing
    is started. podmand's own binds and a started image mount's bind are not the caller's."""
    state, harmless = tree / "state", tree / "harmless"
    harmless.mkdir()
    link = tree / "x" / "link"
    link.parent.mkdir()
    link.symlink_to(harmless)
    labels = {**BASE_LABELS, names.DRIVER_CONFIG_USED: "true"}
    mounts = [*own_binds(state), {"Type": "bind", "Source": str(link), "Destination": "/data"}]

    fakes: list[FakeLibpod] = []

    def setup(fake: FakeLibpod) -> None:
        fakes.append(fake)
        container(labels, mounts)(fake)
        with_store(fake)

    async def body(driver: Driver) -> None:
        [fake] = fakes
        await driver.start("sb1", launch_authentication=BUNDLE)  # harmless: started
        assert fake.count(STARTED) == 1
        await driver.stop("sb1")  # a running pair's start with the same bundle is a retry: nothing to check
        link.unlink()
        link.symlink_to(state)
        with pytest.raises(FailedPrecondition) as exc:
            await driver.start("sb1", launch_authentication=BUNDLE)
        assert exc.value.message == (f"bind mount '/data': {str(link)!r} would expose podmand's own state directory "
                                     f"({state}); choose a path outside it")
        link.unlink()
        link.symlink_to("/srv/podman/graph/overlay")
        with pytest.raises(FailedPrecondition) as exc:
            await driver.start("sb1", launch_authentication=BUNDLE)
        assert "would expose Podman's storage (graphRoot) (/srv/podman/graph)" in exc.value.message
        assert fake.count(STARTED) == 1  # neither refused start reached Podman

    run_driver(OPEN, state, setup, body)


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        (Settings(allow_driver_config=True, admission_enabled=False),
         "bind mount '/data': bind mounts require enable_bind_mounts"),
        (Settings(allow_driver_config=True, enable_bind_mounts=True),
         f"bind mount '/data': {admission.HOST_MOUNT_REFUSED}"),
    ],
)
def test_start_rechecks_that_binds_are_allowed_today(settings: Settings, needle: str, tree: Path) -> None:
    """Turned off since the create (bind mounts, or resource admission on): the bind sandbox does not start."""
    (tree / "harmless").mkdir()
    labels = {**BASE_LABELS, names.DRIVER_CONFIG_USED: "true"}
    mounts = [*own_binds(tree / "state"), {"Type": "bind", "Source": str(tree / "harmless"), "Destination": "/data"}]

    async def body(driver: Driver) -> None:
        with pytest.raises(FailedPrecondition) as exc:
            await driver.start("sb1", launch_authentication=BUNDLE)
        assert exc.value.message.startswith(needle), exc.value.message

    fake = run_driver(settings, tree / "state", container(labels, mounts), body)
    assert fake.count(r"/start$") == 0


def test_podmands_own_binds_from_another_state_directory_are_its_own(tree: Path) -> None:
    """A container made by a podmand with another state directory (restarted with a new one)
    starts under resource admission: its binds at reserved targets are podmand's, not a caller's."""
    labels = {**BASE_LABELS, names.DRIVER_CONFIG_USED: "false"}
    mounts = [m for m in own_binds(tree / "earlier-state") if m["Type"] == "bind" and m["Destination"] != "/img"]

    async def body(driver: Driver) -> None:
        await driver.start("sb1", launch_authentication=BUNDLE)

    fake = run_driver(Settings(), tree / "state", container(labels, mounts), body)
    assert [r for r in fake.requests if re.search(STARTED, r)]


def test_podmands_own_binds_outside_reserved_targets_are_checked(tree: Path) -> None:
    """Only a bind at a reserved target is podmand's own: the same state-directory file
    bound anywhere else is refused."""
    state = tree / "state"
    labels = {**BASE_LABELS, names.DRIVER_CONFIG_USED: "true"}
    stray = {"Type": "bind", "Source": str(state / "sandboxes" / "sb1" / "launch.json"), "Destination": "/tok"}

    async def body(driver: Driver) -> None:
        with pytest.raises(FailedPrecondition) as exc:
            await driver.start("sb1", launch_authentication=BUNDLE)
        assert exc.value.message.startswith("bind mount '/tok': ") and "state directory" in exc.value.message

    fake = run_driver(OPEN, state, container(labels, [*own_binds(state), stray]), body)
    assert fake.count(r"/start$") == 0


# ---------------------------------------------------------------- provisioning re-checks before the first start


def bind_box(sandbox_id: str, source: Path) -> pb.DriverSandbox:
    template = pb.DriverSandboxTemplate(image="registry.example/app:1")
    template.driver_config.update({"mounts": [{"type": "bind", "source": str(source), "target": "/data"}]})
    spec = pb.DriverSandboxSpec(template=template, launch_authentication=make_launch(sandbox_id, "g0000000000000001"))
    return pb.DriverSandbox(id=sandbox_id, name="demo", workspace="ws", spec=spec)


def harmless_link(tmp: Path) -> Path:
    """A bind source as a tenant gives it: a symlink to a harmless directory (for now)."""
    harmless = tmp / "harmless"
    harmless.mkdir()
    link = tmp / "link"
    link.symlink_to(harmless)
    return link


def test_provisioning_rechecks_binds_just_before_the_first_start() -> None:
    """The create RPC checked the bind; by the time the container is made (after pulls, or when
    a restart resumes and adopts it) the source leads into the state directory: the container
    is removed unstarted and the sandbox fails with MountRefused naming the field."""

    async def main() -> None:
        async with driver_on(lambda _tmp: OPEN) as rig:
            await scenario(rig)

    async def scenario(rig: Rig) -> None:
        link = harmless_link(rig.tmp)

        def swapping_create(req: Request) -> Any:
            link.unlink()
            link.symlink_to(rig.driver.state_dir)  # while Podman makes the container
            return rig.boxes.create(req)

        rig.fake.route("POST", "/containers/create", swapping_create)
        await rig.driver.create(bind_box("sb-1", link))
        await eventually(lambda: "MountRefused" in rig.sink.sandbox_reasons(), "the refusal")
        assert rig.fake.count(r"/start$") == 0 and rig.boxes.boxes == {}
        snap = await rig.driver.get("sb-1")
        assert snap.status.conditions[0].message.startswith(
            f"sandbox.spec.template.driver_config.mounts[0].source: {str(link)!r} would expose podmand's own state")

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_resumed_create_rechecks_binds_before_starting_the_container_it_adopts() -> None:
    """podmand went away while Podman made the workload; before the next podmand resumes
    the create the bind source is re-pointed at the state directory: the workload that
    attempt left is removed unstarted and the sandbox fails with MountRefused."""

    async def main() -> None:
        async with driver_on(lambda _tmp: OPEN) as rig:
            await scenario(rig)

    async def scenario(rig: Rig) -> None:
        link = harmless_link(rig.tmp)
        made = asyncio.Event()

        def create(req: Request) -> Any:
            reply = rig.boxes.create(req)
            if (req.json().get("labels") or {}).get(names.SANDBOX_ID) and not made.is_set():
                made.set()  # the workload is made, but podmand is gone before it hears so
                return Hang()
            return reply

        rig.fake.route("POST", "/containers/create", create)
        await rig.driver.create(bind_box("sb-1", link))
        await asyncio.wait_for(made.wait(), 10)
        await rig.driver.close()
        link.unlink()
        link.symlink_to(rig.driver.state_dir)
        sink = Sink()
        again = Driver(rig.driver.settings, rig.driver.podman, rig.driver.state_dir, sink)
        try:
            assert await again.resume() == 1
            await eventually(lambda: "MountRefused" in sink.sandbox_reasons(), "the refusal")
            assert rig.fake.count(r"/start$") == 0 and rig.boxes.boxes == {}
            message = (await again.get("sb-1")).status.conditions[0].message
            assert "would expose podmand's own state directory" in message, message
        finally:
            await again.close()

    asyncio.run(asyncio.wait_for(main(), 30))
