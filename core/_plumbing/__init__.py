"""The kernel's private plumbing: the event loop, serving and reading HTTP (ASGI, listeners and
what a connection may hold), JSON, file descriptors, ids, the reaper and bounded strings. No
plugin imports it; nothing here knows of episodes."""
