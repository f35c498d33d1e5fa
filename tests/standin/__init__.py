"""Tests of the OpenShell supervisor stand-in (tests/images/supervisor/openshell-sandbox.c)."""
