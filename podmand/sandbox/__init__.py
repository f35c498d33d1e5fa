"""One sandbox container, as pure data and pure functions where it can be: the
request checked into a ``plan``, the libpod ``spec`` built from it, and every piece
that spec is made of.

- the request: ``requestchecks`` (single fields), ``driverconfig`` (the caller's
  ``driver_config``), ``identity`` (the workload's uid and gid),
  ``usernamespace``, ``resources``, ``cdi`` (GPUs), ``rootfs`` (staged tars).
- the container: ``plan``, ``spec``, ``envvars``, ``ownmounts``, ``selinux``,
  ``proxy``, ``registryauth``, ``pullprogress``, ``supervisor`` (its cache),
  ``imagefiles`` and ``imagechecks`` (reading and refusing images), ``files``
  (the per-sandbox host files), ``workspace`` (where the workspace volume goes),
  ``mountlinks`` (every mount's destination against the image's symbolic links).
- reading it back: ``snapshots`` (Podman's view as contract snapshots).
- ``settings``: each feature's check of the operator settings it reads.

May import the leaves, ``libpod``, ``config`` and ``security``; nothing above.
``resources`` is this package's own (``spec`` composes it); ``driverconfig``,
``envvars`` and ``ownmounts`` are ``spec``'s parts that ``pair`` reuses for the split
topology's two containers.
"""

__all__ = [
    "cdi",
    "driverconfig",
    "envvars",
    "files",
    "identity",
    "imagechecks",
    "imagefiles",
    "mountlinks",
    "ownmounts",
    "plan",
    "proxy",
    "pullprogress",
    "registryauth",
    "requestchecks",
    "rootfs",
    "selinux",
    "settings",
    "snapshots",
    "spec",
    "supervisor",
    "usernamespace",
    "workspace",
]
