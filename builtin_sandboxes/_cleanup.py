"""What a run's reaper runs once the run is gone, however it went: the sandboxes it left.

``python -I _cleanup.py docker HOST OWNER`` removes every container of the Docker daemon at
``HOST`` labelled ``interplay.owner=OWNER`` (the run's owner tag); ``python -I _cleanup.py
local ROOT`` removes the folder ``ROOT`` holding the run's local sandboxes. Registered by the
backends with :func:`interplay.processes.reap_with` when they first start a sandbox.

Like the reaper it runs as a script of the standard library alone (no interplay, no Docker
SDK: the Engine API over its Unix socket, or plain HTTP), so it starts in tens of
milliseconds; it must not import anything else.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import shutil
import socket
import sys
import urllib.parse

#: Containers removed at once.
REMOVING = 8


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(self.path)


def _connection(host: str) -> http.client.HTTPConnection:
    url = urllib.parse.urlparse(host)
    if url.scheme in ("unix", "http+unix"):
        return _UnixConnection(url.path)
    return http.client.HTTPConnection(url.hostname or "localhost", url.port or 2375,
                                      timeout=30)


def _request(host: str, method: str, path: str) -> tuple[int, bytes]:
    conn = _connection(host)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def containers(host: str, owner: str) -> list[str]:
    """The ids of ``owner``'s containers on the daemon at ``host``, running or not."""
    filters = urllib.parse.quote(json.dumps({"label": [f"interplay.owner={owner}"]}))
    status, body = _request(host, "GET", f"/containers/json?all=1&filters={filters}")
    if status != 200:
        return []
    return [c["Id"] for c in json.loads(body) if isinstance(c, dict) and "Id" in c]


def remove_containers(host: str, owner: str) -> int:
    """Remove ``owner``'s containers (and their anonymous volumes), several at once (a run of
    hundreds at once leaves hundreds, and the reaper gives this a minute); how many went. One
    that cannot be removed does not keep the others."""
    def remove(cid: str) -> bool:
        try:
            status, _ = _request(host, "DELETE", f"/containers/{cid}?force=1&v=1")
        except (OSError, http.client.HTTPException):
            return False
        return status in (204, 404)

    with concurrent.futures.ThreadPoolExecutor(REMOVING) as pool:
        return sum(pool.map(remove, containers(host, owner)))


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "docker":
        try:
            remove_containers(argv[1], argv[2])
        except (OSError, ValueError, http.client.HTTPException):
            return 1
        return 0
    if len(argv) == 2 and argv[0] == "local":
        shutil.rmtree(argv[1], ignore_errors=True)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
