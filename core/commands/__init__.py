"""Commands that read a registry or a run and are no reader package of their own:
``interplay describe`` and ``interplay list``'s details (``describe``), ``interplay generate``
(``generate``) and ``interplay regrade`` (``regrade``)."""
