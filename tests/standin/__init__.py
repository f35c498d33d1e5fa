"""Tests of the Sandbox Protocol stand-ins: the 0.1.x runtime (tests/images/runtime) and
supervisor (tests/images/supervisor2)."""
