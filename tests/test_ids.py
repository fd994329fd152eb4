"""Ids: the right shape, unique, and different in a forked child than in its parent."""

from __future__ import annotations

import os
import re

from interplay._plumbing import ids


def test_ids_are_hex_of_the_asked_length_and_unique() -> None:
    drawn = [ids.new_id(8) for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in drawn)
    assert len(set(drawn)) == len(drawn)
    assert re.fullmatch(r"[0-9a-f]{20}", ids.new_id(10))


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids and leave at once
        try:
            os.write(write, " ".join(ids.new_id(8) for _ in range(50)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        child = set(fh.read().decode().split())
    os.waitpid(pid, 0)
    parent = {ids.new_id(8) for _ in range(50)}
    assert len(child) == 50
    assert not child & parent
