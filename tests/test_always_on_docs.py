"""docs/always_on.md holds one complete scenario (every section, every kind of trigger and
both kinds of contact): this loads the very text and runs it against the scripted model, and
checks the page says what a contact's days are, what happens to an event due mid-turn, and what
``late`` and ``late_events`` count."""

from __future__ import annotations

import re
from pathlib import Path

from always_on_support import Agent

from interplay.run.loader import env_from_toml
from interplay.testing import ScriptedReply, run_scripted

DOC = Path(__file__).resolve().parents[1] / "docs" / "always_on.md"
MARK = "# docs/always_on.md: a complete scenario"


def complete_scenario() -> str:
    blocks = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    [block] = [b for b in blocks if b.startswith(MARK)]
    return block


def decide(text: str) -> ScriptedReply:
    """The agent's answer to a wake: asks the venue and Sam, passes on the venue's offer,
    books after her yes."""
    if "find us a place for the team dinner" in text:
        return ScriptedReply.calls([
            ("send_email", {"to": "events@lindenhof.example", "subject": "Dinner Thursday",
                            "body": "A table for 8 on Thursday?"}),
            ("send_email", {"to": "sam@example.com", "subject": "Diets?",
                            "body": "Any diets for Thursday?"}),
            ("message_user", {"text": "I asked the Lindenhof and Sam."})])
    if "Email from Lindenhof" in text and "deposit" in text:
        return ScriptedReply.tool_call("message_user", {
            "text": "The Lindenhof has a table Thursday at 19:00; the deposit is 80 EUR. "
                    "Shall I book it?"})
    if "(the user) replied" in text and "please book" in text:
        return ScriptedReply.tool_call("book", {"place": "Lindenhof", "date": "2025-06-05",
                                                "guests": 8})
    return ScriptedReply.tool_call("stay_quiet", {})


async def test_the_complete_scenario_loads_and_runs(tmp_path: Path) -> None:
    path = tmp_path / "dinner.toml"
    path.write_text(complete_scenario())
    env = env_from_toml(path)()
    env.check()
    task = next(iter(env.tasks()))
    result = await run_scripted(env, task, Agent(
        decide, user=lambda _: "#2 Yes, 80 EUR is fine, please book it.",
        contact=lambda _: "Two of us are vegetarian."))
    episode = result.episode
    assert episode.error is None, episode.error
    ao = episode.results["always_on"]
    assert ao["end_reason"] == "end_time"
    fired = {name for name, state in ao["triggers"].items() if state["fired"]}
    assert fired == {"standup", "digest", "nudge-from-dana", "venue-answers", "sam-answers",
                     "deposit"}
    sources = [s for e in ao["timeline"] if e["kind"] == "wake" for s in e["sources"]]
    kinds = {s["kind"] for s in sources}
    assert {"opening", "line", "user_reply", "alert", "contact_reply", "reminder",
            "final_notice"} <= kinds
    assert {s["contact"] for s in sources if s["kind"] == "contact_reply"} == {"Lindenhof",
                                                                                "Sam"}
    opening = next(s for s in sources if s["kind"] == "opening")
    assert opening["due"] == "2025-06-02T08:30:00+02:00"  # her opening's time
    booked = [e for e in ao["timeline"] if e["kind"] == "change" and e["action"] == "booked"]
    assert booked and (booked[0]["by"], booked[0]["actor"]) == ("assistant", "agent")
    added = [e for e in ao["timeline"] if e["kind"] == "change" and e["action"] == "event_added"]
    assert added and added[0]["by"] == "others"
    assert episode.rewards[0].name == "asked_before" and episode.rewards[0].value == 1.0
    # The venue answers in its office hours: asked at 08:30, it answered after 10:00.
    venue = next(s for s in sources if s.get("contact") == "Lindenhof")
    assert venue["due"] >= "2025-06-02T10:00"
    tools = {t["function"]["name"] for t in result.requests[0].body["tools"]}
    assert "cancel_check" in tools and not {"cancel_event", "cancel_booking"} & tools


def test_every_section_is_in_the_complete_scenario() -> None:
    text = complete_scenario()
    sections = {"[user]", "[always_on]", "[[apps]]", "[[contacts]]", "[[triggers]]",
                "[[lines]]", "[[queued]]", "[[tasks]]", "[seats.assistant]", "[[verifiers]]"}
    assert all(section in text for section in sections)
    top = {"name", "description", "start", "end", "timezone", "rate", "opening"}
    assert all(re.search(rf"^{key} = ", text, re.M) for key in top)
    for kind in ("at = ", "after = ", "every = ", "on_tool = ", "on_change = "):
        assert kind in text
    for action in ('kind = "notify"', 'to = "phone"', 'to = "chat"', 'kind = "reply"',
                   'kind = "tool"'):
        assert action in text
    assert "persona = " in text and "replies = " in text


def test_the_page_says_what_days_mid_turn_events_and_late_are() -> None:
    page = " ".join(DOC.read_text().split())
    assert "the days they work (`mon`..`sun` or full names, `weekdays`, `weekend`, `daily`)" \
        in page
    assert "**An event due while a turn runs** (`rate` > 0)" in page
    assert "is carried out at its time, whatever the agent is doing" in page
    assert "**Late.** A wake's source is `late` when it reaches the agent in a later minute " \
           "than the one it fell due in" in page
    assert "`late_events` counts those" in page
