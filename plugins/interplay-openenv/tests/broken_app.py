"""An app whose module fails to import, as a broken environment package would."""

raise RuntimeError("this environment is broken")
