"""podmand: an OpenShell ComputeDriver that runs sandboxes as rootless Podman containers."""

__version__ = "0.1.0"
