"""Configuration: TOML files and ``--set`` overrides structured into attrs classes
(``loading``), what a settings class says of each field (``settings``), and where a model lives
and how to reach it (``endpoint``)."""
