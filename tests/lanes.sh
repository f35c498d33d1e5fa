# tests/lanes.sh - which tests run on which Podman: sourced by tests/run.sh (each lane's
# default) and .ci/run (which runs every lane). docs/podman-versions.md says why each is where.
#
#   Podman 4.3.1 (the host; `tests/run.sh`, the README's command): HOST_SET, every test that needs
#       no Podman (unit, faults with the fake libpod, the stand-ins' own tests, the proto), the
#       ship tests and the e2e files in EVERY_LANE; it holds podmand/ at 90 % branch coverage.
#   Podman 5.4.2 (`--podman 5.4`): EVERY_LANE + LANE_5X, and the ship tests.
#   Podman 5.8.6 (`--podman 5.8`): EVERY_LANE and the ship tests.
#   Podman 6.1.1 (`--podman 6.1`): EVERY_LANE + every e2e file in no list here (what Podman 6
#       changed most: pulls and registries, cgroup v2 limits, doctor, user namespaces, volumes,
#       the event stream's faults) but VM_ONLY's, so a new file runs there until it is placed;
#       and the ship tests.
#   The systemd VM (`--host vm`, Podman 5.4.2 as Debian 13 ships it, with systemd, cgroup v2,
#       crun and journald): VM_LANE.
# Every e2e file runs on at least one Podman; EVERY_LANE's on all four.
EVERY_LANE=(test_lifecycle test_watch test_credentials test_pair_driver test_pair_lifecycle test_teardown)
LANE_5X=(test_readme test_hardening_input test_ctl test_tenants test_supervisor_binary test_sidecar
         test_proxy test_mounts test_logsize test_traces)
# Files that need a systemd host: only the VM lane runs them (elsewhere they would only skip).
VM_ONLY=(test_systemd_host)
# The VM runs about eight times slower than the host (a sandbox's create about a minute): what
# only a systemd host can show, the pair's lifecycle (the launcher's form; every other lane runs
# both), the watch tests that meet journald's events and the socket-activated service's restart,
# and the supervisor's health check under Podman's own timers. About 13 minutes of tests there,
# about 18 for the lane with its image made afresh.
VM_LANE=(tests/e2e/test_systemd_host.py
         tests/e2e/test_watch.py::test_out_of_band_kill_reaches_every_watcher
         tests/e2e/test_watch.py::test_podman_restart_ends_streams_then_snapshot_is_exact
         "tests/e2e/test_pair_lifecycle.py::test_pair_create_stop_start_delete[launcher-form]"
         tests/e2e/test_health.py::test_the_supervisors_health_check_is_the_sandboxs_ready)

e2e_files() {  # LANE (core, 5x or 6x): the e2e files that lane runs, as pytest paths
    local name f
    for name in "${EVERY_LANE[@]}"; do echo "tests/e2e/$name.py"; done
    case "$1" in
        core) ;;
        5x) for name in "${LANE_5X[@]}"; do echo "tests/e2e/$name.py"; done ;;
        6x) for f in tests/e2e/test_*.py; do
                name=$(basename "$f" .py)
                printf '%s\n' "${EVERY_LANE[@]}" "${LANE_5X[@]}" "${VM_ONLY[@]}" | grep -qx "$name" || echo "$f"
            done ;;
    esac
}

host_set() {  # the host's default: every test outside tests/e2e, and EVERY_LANE's e2e files
    local d
    for d in tests/test_*.py tests/*/; do
        [ "$d" != tests/e2e/ ] && compgen -G "${d%/}/test_*.py" >/dev/null && echo "${d%/}"
        [ -f "$d" ] && echo "$d"
    done
    e2e_files core
}

check_lanes() {  # a name in the lists with no such file would silently run nothing
    local name
    for name in "${EVERY_LANE[@]}" "${LANE_5X[@]}" "${VM_ONLY[@]}"; do
        [ -f "tests/e2e/$name.py" ] || { echo "tests/lanes.sh: tests/e2e/$name.py does not exist" >&2; return 2; }
    done
    for name in "${VM_LANE[@]}"; do
        [ -f "${name%%::*}" ] || { echo "tests/lanes.sh: ${name%%::*} does not exist" >&2; return 2; }
    done
}
