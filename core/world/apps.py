"""Apps: the world's tool providers with state (a calendar, an inbox, bookings, notes, a shop).

An app is a Python class with a JSON-able ``state`` and methods marked :func:`app_tool`, which
become the agent's tools (the signature is the JSON schema, the docstring the description).
Every change an app makes goes through :meth:`App.change`, which the world records in its
changelog with who made it (``agent``, ``others``, ``none`` or ``user``), the wake and the
phase. Apps are made fresh per episode from a scenario's initial state; a scenario names a
builtin app by its kind, or an app of its own by import path (``my_pkg.apps:Pantry``).

Of the world, an app uses the clock, the time zone and the changelog
(:class:`~interplay.world.protocols.AppHost`), handed to it when the world adds it.

The builtin apps here keep to what a scenario needs; write your own for more.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from interplay.errors import InterplayError
from interplay.values.tools import Tool, tool
from interplay.world import times
from interplay.world.protocols import AppHost


def app_tool(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Mark an app method as a tool of the agent's (``@app_tool`` or
    ``@app_tool(name="...")``)."""

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__app_tool__ = name or f.__name__  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


class App:
    """Base class of every app. ``kind`` names it in scenarios; ``initial()`` is the state a
    scenario's ``state`` table is laid over."""

    kind: ClassVar[str] = ""

    def __init__(self, name: str, state: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.state: dict[str, Any] = {**self.initial(), **copy.deepcopy(dict(state or {}))}
        self._seed_ids()
        #: The world it is in (set when the world adds it).
        self.world: AppHost | None = None

    def initial(self) -> dict[str, Any]:
        return {}

    def problems(self) -> list[str]:
        """What is wrong with the initial state (empty when it is usable)."""
        return []

    def tools(self) -> list[Tool]:
        out = []
        for attr in dir(type(self)):
            tool_name = getattr(inspect.getattr_static(type(self), attr), "__app_tool__", None)
            if tool_name:
                out.append(tool(getattr(self, attr), name=tool_name))
        return sorted(out, key=lambda t: t.name)

    # -- for app code ------------------------------------------------------------------------

    @property
    def bound(self) -> AppHost:
        if self.world is None:
            raise RuntimeError(f"app {self.name!r} is not in a world")
        return self.world

    def now(self) -> float:
        return self.bound.clock.now()

    def stamp(self) -> str:
        """The current task time as an ISO local time."""
        return times.iso(self.now(), self.bound.timezone)

    def when(self, text: str) -> float:
        """A time argument (ISO local date-time, or a duration from now) as epoch seconds."""
        return times.parse_when(text, self.bound.timezone, self.now())

    def change(self, action: str, **data: Any) -> None:
        """Record a change this app made (call it after changing ``state``)."""
        self.bound.record_change(self.name, action, data)

    def _seed_ids(self) -> None:
        """Count on from the ids the initial state already uses (``e1``, ``m3``, ...), so an
        id handed out never repeats one the scenario gave, even once that item is gone."""
        counters = self.state.setdefault("_ids", {})
        for value in self.state.values():
            for item in value if isinstance(value, list) else ():
                found = _ID.match(str(item.get("id", ""))) if isinstance(item, dict) else None
                if found:
                    prefix, number = found[1], int(found[2])
                    counters[prefix] = max(counters.get(prefix, 0), number)

    def next_id(self, prefix: str) -> str:
        """A new id, ``prefix`` and a number, never handed out before (nor by the initial
        state: the counters start past its ids)."""
        counters = self.state.setdefault("_ids", {})
        counters[prefix] = counters.get(prefix, 0) + 1
        return f"{prefix}{counters[prefix]}"

    def deliver(self, sender: str, text: str, **meta: Any) -> None:
        """Take a contact's reply into this app (an inbox files it); apps that cannot refuse."""
        raise InterplayError(f"app {self.name!r} ({self.kind}) does not take contacts' replies; "
                             f"point the contact at an inbox app")


_ID = re.compile(r"^([a-z]+)(\d+)$")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class Calendar(App):
    """Events with a title, start, end and place."""

    kind = "calendar"

    def initial(self) -> dict[str, Any]:
        return {"events": []}

    def _find(self, event_id: str) -> dict[str, Any]:
        for event in self.state["events"]:
            if event.get("id") == event_id:
                return event
        raise ValueError(f"there is no event {event_id!r}")

    @app_tool
    def list_events(self, day: str = "") -> str:
        """Events on a day (YYYY-MM-DD, local time); without a day, the next seven days."""
        tz = self.bound.timezone
        if day:
            start = times.parse_instant(day, tz)
            end = start + 86400
        else:
            start, end = self.now(), self.now() + 7 * 86400
        hits = [e for e in self.state["events"]
                if start <= times.parse_instant(e["start"], tz) < end]
        return _json(sorted(hits, key=lambda e: times.parse_instant(e["start"], tz)))

    @app_tool
    def add_event(self, title: str, start: str, end: str, where: str = "") -> str:
        """Add an event; start and end are local date-times such as 2025-06-07T19:00."""
        tz = self.bound.timezone
        if times.parse_instant(end, tz) <= times.parse_instant(start, tz):
            raise ValueError("the event must end after it starts")
        event = {"id": self.next_id("e"), "title": title, "start": start,
                 "end": end, "where": where}
        self.state["events"].append(event)
        self.change("event_added", id=event["id"], title=title, start=start, end=end)
        return _json(event)

    @app_tool
    def move_event(self, event_id: str, start: str, end: str) -> str:
        """Move an event to a new start and end (local date-times)."""
        event = self._find(event_id)
        event.update(start=start, end=end)
        self.change("event_moved", id=event_id, start=start, end=end)
        return _json(event)

    @app_tool
    def cancel_event(self, event_id: str) -> str:
        """Remove an event."""
        event = self._find(event_id)
        self.state["events"].remove(event)
        self.change("event_cancelled", id=event_id, title=event.get("title", ""))
        return f"cancelled {event_id}"


class Inbox(App):
    """E-mail: list, read and send messages; contacts' replies arrive here."""

    kind = "inbox"

    def initial(self) -> dict[str, Any]:
        return {"address": "", "messages": []}

    @app_tool
    def list_emails(self, unread_only: bool = False) -> str:
        """The inbox's e-mails, newest first (id, from, subject, time, read)."""
        rows = [{k: m.get(k) for k in ("id", "from", "to", "subject", "at", "read")}
                for m in self.state["messages"] if not unread_only or not m.get("read")]
        return _json(rows[::-1])

    @app_tool
    def read_email(self, email_id: str) -> str:
        """One e-mail in full; marks it read."""
        for message in self.state["messages"]:
            if message.get("id") == email_id:
                if not message.get("read"):
                    message["read"] = True
                    self.change("email_read", id=email_id)
                return _json(message)
        raise ValueError(f"there is no e-mail {email_id!r}")

    @app_tool
    def send_email(self, to: str, subject: str, body: str) -> str:
        """Send an e-mail from the user's address."""
        if "@" not in to:
            raise ValueError(f"{to!r} is not an e-mail address")
        message = {"id": self.next_id("m"),
                   "from": self.state.get("address", ""), "to": to,
                   "subject": subject, "body": body, "at": self.stamp(), "read": True,
                   "sent": True}
        self.state["messages"].append(message)
        self.change("email_sent", id=message["id"], to=to, subject=subject)
        return f"sent {message['id']} to {to}"

    def deliver(self, sender: str, text: str, **meta: Any) -> None:
        message = {"id": self.next_id("m"), "from": sender,
                   "to": self.state.get("address", ""),
                   "subject": str(meta.get("subject") or ""), "body": text, "at": self.stamp(),
                   "read": False}
        self.state["messages"].append(message)
        self.change("email_received", id=message["id"], sender=sender,
                    subject=message["subject"])


class Bookings(App):
    """Places that take bookings, each with a price and a deposit that is charged on booking."""

    kind = "bookings"

    def initial(self) -> dict[str, Any]:
        return {"places": {}, "bookings": [], "spent": 0}

    def problems(self) -> list[str]:
        places = self.state.get("places")
        if not isinstance(places, dict):
            return ["state.places must be a table of places"]
        return [f"state.places.{name}: needs a number deposit" for name, place in places.items()
                if not isinstance(place, dict)
                or not isinstance(place.get("deposit", 0), int | float)]

    def _place(self, place: str) -> tuple[str, dict[str, Any]]:
        for name, info in self.state["places"].items():
            if name.casefold() == place.strip().casefold():
                return name, info
        raise ValueError(f"there is no place {place!r}; places: "
                         f"{', '.join(self.state['places']) or 'none'}")

    @app_tool
    def list_places(self) -> str:
        """The places, with what each offers, its price and its deposit."""
        return _json(self.state["places"])

    @app_tool
    def check_availability(self, place: str, date: str) -> str:
        """Whether a place is free on a date (YYYY-MM-DD)."""
        name, info = self._place(place)
        taken = date in info.get("taken", []) or any(
            b["place"] == name and b["date"] == date for b in self.state["bookings"])
        return _json({"place": name, "date": date, "available": not taken})

    @app_tool
    def book(self, place: str, date: str, guests: int) -> str:
        """Book a place for a date (YYYY-MM-DD) and a number of guests; charges its deposit."""
        name, info = self._place(place)
        if json.loads(self.check_availability(name, date))["available"] is False:
            raise ValueError(f"{name} is not available on {date}")
        capacity = info.get("capacity")
        if isinstance(capacity, int) and guests > capacity:
            raise ValueError(f"{name} takes at most {capacity} guests")
        deposit = info.get("deposit", 0)
        booking = {"id": self.next_id("b"), "place": name,
                   "date": date, "guests": guests, "deposit": deposit}
        self.state["bookings"].append(booking)
        self.state["spent"] = self.state.get("spent", 0) + deposit
        self.change("booked", **booking)
        return _json(booking)

    @app_tool
    def cancel_booking(self, booking_id: str) -> str:
        """Cancel a booking (the deposit is not returned)."""
        for booking in self.state["bookings"]:
            if booking["id"] == booking_id:
                self.state["bookings"].remove(booking)
                self.change("booking_cancelled", id=booking_id, place=booking["place"])
                return f"cancelled {booking_id}"
        raise ValueError(f"there is no booking {booking_id!r}")


class Notes(App):
    """Plain notes."""

    kind = "notes"

    def initial(self) -> dict[str, Any]:
        return {"notes": []}

    @app_tool
    def add_note(self, text: str) -> str:
        """Write a note."""
        note = {"id": self.next_id("n"), "text": text, "at": self.stamp()}
        self.state["notes"].append(note)
        self.change("note_added", id=note["id"], chars=len(text))
        return f"noted {note['id']}"

    @app_tool
    def list_notes(self) -> str:
        """Every note, oldest first."""
        return _json(self.state["notes"])


class Shop(App):
    """A shop with items in stock; buying spends money."""

    kind = "shop"

    def initial(self) -> dict[str, Any]:
        return {"items": {}, "orders": [], "spent": 0}

    @app_tool
    def search_items(self, query: str) -> str:
        """Items whose name contains the query, with price and stock."""
        q = query.casefold()
        return _json({sku: item for sku, item in self.state["items"].items()
                      if q in str(item.get("name", sku)).casefold()})

    @app_tool
    def buy(self, sku: str, quantity: int = 1) -> str:
        """Buy an item by its sku."""
        item = self.state["items"].get(sku)
        if item is None:
            raise ValueError(f"there is no item {sku!r}")
        if quantity < 1 or quantity > int(item.get("stock", 0)):
            raise ValueError(f"cannot buy {quantity} of {sku!r} ({item.get('stock', 0)} in stock)")
        item["stock"] = int(item.get("stock", 0)) - quantity
        total = float(item.get("price", 0)) * quantity
        order = {"id": self.next_id("o"), "sku": sku,
                 "quantity": quantity, "total": total}
        self.state["orders"].append(order)
        self.state["spent"] = self.state.get("spent", 0) + total
        self.change("bought", **order)
        return _json(order)

    @app_tool
    def set_price(self, sku: str, price: float) -> str:
        """Change an item's price."""
        item = self.state["items"].get(sku)
        if item is None:
            raise ValueError(f"there is no item {sku!r}")
        item["price"] = price
        self.change("price_changed", sku=sku, price=price)
        return _json({sku: item})


BUILTIN_APPS: dict[str, type[App]] = {cls.kind: cls for cls in
                                      (Calendar, Inbox, Bookings, Notes, Shop)}


def app_class(kind: str) -> type[App]:
    """A builtin app by kind, or an app class by import path (``module:Class``)."""
    if kind in BUILTIN_APPS:
        return BUILTIN_APPS[kind]
    if ":" not in kind:
        raise InterplayError(f"unknown app kind {kind!r}; builtin apps: "
                             f"{', '.join(sorted(BUILTIN_APPS))}, or name your own as "
                             f"'module:Class'")
    module_name, _, class_name = kind.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise InterplayError(f"app {kind!r} cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, App)):
        raise InterplayError(f"app {kind!r} is not a subclass of interplay.world.App")
    return cls
