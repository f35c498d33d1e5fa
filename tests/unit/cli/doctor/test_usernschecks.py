"""Unit tests for doctor's 'userns requests' line: what a sandbox's driver_config.userns_mode may ask for."""

from __future__ import annotations

import pytest

from podmand.cli.doctor.hostchecks import check_userns_requests


@pytest.mark.parametrize(
    ("allow", "driver_config", "userns", "rootless", "status", "finding"),
    [
        (True, True, "nomap", True, "OK", "on: a sandbox may ask for nomap; auto cannot run beside this podmand's "
         "userns=nomap: keep-id and nomap take every subordinate id, so Podman refuses userns=auto containers while "
         "one exists; keep-id maps podmand's own uid: it needs allow_userns_own_uid"),
        (False, True, "auto", True, "OK", "off: every sandbox gets userns=auto; driver_config.userns_mode is refused"),
        (True, False, "auto", True, "WARN", "allow_userns is on but allow_driver_config is off"),
        (True, True, "auto:size=2048", True, "OK", "on: a sandbox may ask for auto; keep-id cannot run beside"),
        (True, True, "keep-id", True, "OK", "on: a sandbox may ask for keep-id, nomap; auto cannot run beside"),
        (True, True, "host", True, "OK", "on: a sandbox may ask for keep-id, auto, nomap; while a keep-id or nomap"),
        (True, True, "host", False, "OK", "on: a sandbox may ask for auto; keep-id needs rootless Podman"),
    ],
)
def test_userns_requests(allow: bool, driver_config: bool, userns: str, rootless: bool, status: str,
                         finding: str) -> None:
    own_uid = userns.startswith(("keep-id", "host"))  # which a podmand with these settings needs
    check = check_userns_requests(allow, driver_config, userns, rootless, own_uid)
    assert (check.name, check.status) == ("userns requests", status)
    assert check.finding.startswith(finding), check.finding
    assert bool(check.fix) == (status == "WARN")
