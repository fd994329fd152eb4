"""The records and values every layer speaks in: the records of a run and their JSON form
(``records``, with ``splicing``), the tools a seat can call (``tools``), where tasks come from
(``taskset``) and the virtual clock (``clock``)."""
