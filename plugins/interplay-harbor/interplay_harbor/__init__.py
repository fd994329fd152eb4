"""Harbor tasks (terminal-bench 2.0's format) on interplay: the ``harbor`` env over a folder
of task folders, Harbor's ``oracle`` and ``nop`` agents as harnesses, its verifier's rules, and
``interplay export --format harbor`` writing a Harbor job folder."""
