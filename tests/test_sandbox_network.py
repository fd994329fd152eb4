"""The docker sandbox's networks against the real daemon, seen from a program inside: ``none``
reaches nothing (not even a server on this machine's 127.0.0.1), ``model`` reaches the servers
``reach`` was asked for at their own addresses and nothing else (another 127.0.0.1 port of
this machine with a live server behind it is refused; the internet has no route), and carries
many connections at once whole; ``host`` reaches this machine's network. The servers are real
HTTP servers on 127.0.0.1 of this machine, each in a thread of its own."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from sandbox_support import http_server, needs_docker, needs_root, remove_labelled

from interplay.builtin_sandboxes.docker import DockerSandbox
from interplay.contracts.sandbox import NotReachable, SandboxError, SandboxPlan

pytestmark = [needs_docker, pytest.mark.slow]

MARK = f"network-{secrets.token_hex(4)}"

#: A program inside: GET each URL, print what each answered (or why it could not).
FETCH = """
import json, sys, urllib.request
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except Exception as exc:
        return f"error: {getattr(exc, 'reason', exc)}"
print(json.dumps([get(u) for u in sys.argv[1:]]))
"""

#: A program inside: N POSTs at once of SIZE random bytes each; how many came back whole.
LOAD = """
import concurrent.futures, os, sys, urllib.request
url, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def post(i):
    body = os.urandom(size)
    request = urllib.request.Request(url, data=body, method="POST")
    return urllib.request.urlopen(request, timeout=120).read() == body
with concurrent.futures.ThreadPoolExecutor(n) as pool:
    print(sum(pool.map(post, range(n))))
"""

Started = Callable[..., Any]


@pytest.fixture
async def started() -> AsyncIterator[Started]:
    made: list[DockerSandbox] = []

    async def start(network: str | None, *, reach: bool = False) -> DockerSandbox:
        sandbox = DockerSandbox({} if network is None else {"network": network})
        made.append(sandbox)
        await sandbox.start(SandboxPlan(reach=reach, labels={"test": MARK}))
        return sandbox

    yield start
    for sandbox in made:
        await sandbox.stop()
    remove_labelled("interplay.test", MARK)


async def _fetch(sandbox: DockerSandbox, *urls: str) -> list[str]:
    result = await sandbox.exec(["python3", "-c", FETCH, *urls], timeout_s=60)
    assert result.exit_code == 0, result
    return json.loads(result.stdout)  # type: ignore[no-any-return]


async def test_none_reaches_nothing_not_even_this_machines_loopback(started: Started) -> None:
    sandbox = await started("none")
    assert sandbox.record()["network"] == "none"
    with http_server() as here:
        [answer] = await _fetch(sandbox, here)
        assert answer.startswith("error:") and "refused" in answer
        with pytest.raises(NotReachable, match=re.escape('set sandbox.network = "model"')):
            await sandbox.reach(here)
    [outside] = await _fetch(sandbox, "http://1.1.1.1/")
    assert outside.startswith("error:") and "unreachable" in outside


@needs_root
async def test_model_reaches_the_servers_asked_for_and_nothing_else(started: Started) -> None:
    # Unset, the network is model when a program inside needs the model.
    sandbox = await started(None, reach=True)
    assert sandbox.record()["network"] == "model"
    with http_server() as boundary, http_server() as gateway, http_server() as other:
        # The very URL it has on this machine.
        assert await sandbox.reach(f"{boundary}/v1") == f"{boundary}/v1"
        assert await sandbox.reach(gateway) == gateway
        answers = await _fetch(sandbox, boundary, gateway, other,
                               other.replace("127.0.0.1", "localhost"))
        port = boundary.rsplit(":", 1)[1]
        assert answers[0] == f"hello from {port}"
        assert answers[1] == f"hello from {gateway.rsplit(':', 1)[1]}"
        # Another port of this machine, a live server behind it: refused.
        assert answers[2].startswith("error:") and "refused" in answers[2]
        assert answers[3].startswith("error:")
    [outside] = await _fetch(sandbox, "http://1.1.1.1/")
    assert outside.startswith("error:") and "unreachable" in outside
    assert sandbox.record()["forwarded_connections"] == 2


@needs_root
async def test_model_carries_many_connections_at_once_whole(started: Started) -> None:
    sandbox = await started("model")
    with http_server() as server:
        await sandbox.reach(server)
        result = await sandbox.exec(["python3", "-c", LOAD, server, "48", str(256 * 1024)],
                                    timeout_s=300)
        assert result.exit_code == 0, result
        assert result.stdout.strip() == "48"
        assert sandbox.record()["forwarded_connections"] == 48


@needs_root
async def test_model_refuses_an_address_not_of_this_machine(started: Started) -> None:
    sandbox = await started("model")
    with pytest.raises(NotReachable, match="only interplay's own servers"):
        await sandbox.reach("http://example.org:80/")
    # Once removed, nothing to reach through: said as such.
    await sandbox.stop()
    with pytest.raises(SandboxError, match="the sandbox is not running"):
        await sandbox.reach("http://127.0.0.1:9/")


async def test_host_reaches_this_machines_network(started: Started) -> None:
    sandbox = await started("host")
    with http_server() as server, http_server() as other:
        assert await sandbox.reach(server) == server
        answers = await _fetch(sandbox, server, other)
        assert answers == [f"hello from {server.rsplit(':', 1)[1]}",
                           f"hello from {other.rsplit(':', 1)[1]}"]
