"""The ``always-on-month`` scenario: 30 days and 500 events drawn from a fixed seed, for the
fidelity benchmark (``benchmarks/bench_always_on.py``) and for long runs.

The events: a daily digest (30), alerts at random minutes (280), lines the user writes (60),
items on her phone (100) and price changes in her shop (30, changing the world without waking
anyone). Two scripted contacts answer e-mails. The scenario is data like any other: this
module writes ``data/always_on_month.json`` (``python -m
interplay.builtin_envs.always_on.month``), and a test checks the file is what it makes.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
from pathlib import Path
from typing import Any

START = dt.datetime(2025, 9, 1, 0, 0)
DAYS = 30
TIMEZONE = "Asia/Tokyo"
COUNTS = {"digest": 30, "alert": 280, "line": 60, "phone": 100, "price": 30}
SOURCES = ("calendar", "bank", "news", "weather", "shop", "school", "gym")
TOPICS = ("the rent", "a parcel", "the dentist", "a train delay", "the team dinner",
          "a password reset", "the electricity bill", "a birthday", "a flight", "the plumber")
SENDERS = ("Mum", "Yuki", "Hana", "Delivery", "Pharmacy", "Landlord")


def _minute(rng: random.Random, *, awake: bool = False) -> str:
    """A random local minute of the month (between 08:00 and 22:00 when ``awake``)."""
    day = rng.randrange(DAYS)
    low, high = (8 * 60, 22 * 60) if awake else (0, 24 * 60)
    when = START + dt.timedelta(days=day, minutes=rng.randrange(low, high))
    return when.strftime("%Y-%m-%dT%H:%M")


def month_scenario(seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    triggers: list[dict[str, Any]] = [{
        "name": "digest", "at": "2025-09-01T07:30", "every": "P1D", "count": COUNTS["digest"],
        "actions": [{"kind": "notify", "source": "digest",
                     "text": "Good morning: today's digest (day {fire})."}]}]
    for i in range(COUNTS["alert"]):
        source, topic = rng.choice(SOURCES), rng.choice(TOPICS)
        triggers.append({"name": f"alert-{i:03d}", "at": _minute(rng), "actions": [
            {"kind": "notify", "source": source, "text": f"Something about {topic} ({i})."}]})
    for i in range(COUNTS["phone"]):
        triggers.append({"name": f"phone-{i:03d}", "at": _minute(rng), "actions": [
            {"kind": "notify", "to": "phone", "channel": rng.choice(("sms", "app", "call")),
             "source": rng.choice(SENDERS), "text": f"About {rng.choice(TOPICS)} ({i})."}]})
    for i in range(COUNTS["price"]):
        triggers.append({"name": f"price-{i:03d}", "at": _minute(rng), "actions": [
            {"kind": "tool", "app": "shop", "tool": "set_price",
             "args": {"sku": rng.choice(("rice", "tea", "soap")),
                      "price": rng.randrange(200, 2000)}}]})
    triggers += [{"name": f"{who}-answers", "on_tool": "send_email",
                  "match": {"to": f"{who}@*"}, "actions": [{"kind": "reply", "contact": who}]}
                 for who in ("landlord", "plumber")]
    lines = [{"at": _minute(rng, awake=True), "text": f"Can you look into {rng.choice(TOPICS)}? "
                                                      f"({i})"} for i in range(COUNTS["line"])]
    return {
        "name": "always-on-month",
        "description": "A month (30 days, 500 events from a fixed seed) of an assistant's "
                       "life: digests, alerts, the user's requests, her phone, a shop.",
        "start": START.strftime("%Y-%m-%dT%H:%M"), "end": f"P{DAYS}D",
        "timezone": TIMEZONE, "rate": 0.0,
        "user": {"name": "Kai", "email": "kai@tanaka.example", "timezone": TIMEZONE,
                 "description": "Kai Tanaka, a teacher in Osaka: short answers, busy on "
                                "weekdays.",
                 "awake": ["07:00", "23:30"],
                 "busy": [{"start": "09:30", "end": "18:30", "days": ["weekdays"],
                           "label": "school"}],
                 "reply_delays": {"free": ["PT2M", "PT30M"], "busy": ["PT10M", "PT1H"],
                                  "woken": ["PT15M", "PT1H"]}},
        "always_on": {"max_wakes": 2000},
        "apps": [{"kind": "inbox", "state": {"address": "kai@tanaka.example"}},
                 {"kind": "shop", "state": {"items": {
                     "rice": {"name": "rice 5kg", "price": 2400, "stock": 20},
                     "tea": {"name": "green tea", "price": 800, "stock": 50},
                     "soap": {"name": "soap", "price": 300, "stock": 80}}}},
                 {"kind": "notes"}],
        "contacts": [
            {"name": "landlord", "address": "landlord@osaka-homes.example", "app": "inbox",
             "delay": ["PT2H", "P1D"], "hours": ["09:00", "18:00"], "days": ["weekdays"],
             "replies": ["Noted, I will get back to you.", "All sorted, thanks."]},
            {"name": "plumber", "address": "plumber@fix-it.example", "app": "inbox",
             "delay": ["PT30M", "PT4H"], "hours": ["08:00", "20:00"],
             "replies": ["I can come on Thursday morning.", "Done, see the invoice."]}],
        "triggers": triggers,
        "lines": lines,
        "tasks": [{"prompt": "From today, please keep an eye on my days for me: tell me what "
                             "needs me, handle what you can, and stay quiet otherwise."}],
    }


def data_path() -> Path:
    return Path(__file__).parent.parent / "data" / "always_on_month.json"


def render(seed: int = 0) -> str:
    return json.dumps(month_scenario(seed), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    data_path().write_text(render())
    sys.stdout.write(f"wrote {data_path()}\n")
