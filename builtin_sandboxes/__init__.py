"""The builtin sandbox backends: ``docker`` (a container per episode on this machine's Docker
Engine: limits, a network policy, images) and ``local`` (a folder per episode, no isolation).
Registered in-process by :mod:`~interplay.builtin_sandboxes.plugin`."""
