"""The contracts a plugin implements: ``env``, ``harness``, ``step``, ``verifier``, ``usersim``,
``sandbox``, ``exporter`` (an export format) and ``scenario`` (a scenario kind for always_on
tasks); and what they are handed (``contexts``: protocols the run implements)."""
