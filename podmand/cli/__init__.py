"""The operator tools: ``podmand ctl``, ``doctor``, ``health``, ``completion`` and ``--version``.
They talk to the driver socket or to Podman and import no driver internals, nor server, servicer or hub."""
