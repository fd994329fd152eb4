"""The plugin host: the pluggy manager and what it loaded (``host``), the registry of names
every plugin registered (``registry``) and the hook specifications (``hookspecs``)."""
