"""The always_on loop on the scripted model: every wake source, jumps in order and never past an
event, the user's reads (free, busy, asleep, overdue), reply delays, same-minute arrivals, fires
side by side, settling contacts, the nudge, the rules, and what a read may hold."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import always_on_support as support
import attrs
import pytest
from always_on_support import Agent, by_pattern, make_env, quiet, run, say, timeline, wakes

from interplay import hookimpl
from interplay.contracts.usersim import Answer, Read, UserSim
from interplay.errors import InterplayError
from interplay.testing import ScriptedReply
from interplay.world import times

BERLIN = "Europe/Berlin"


@pytest.fixture(autouse=True)
def script_user(register_plugin: Any) -> None:
    register_plugin(support, "always-on-support")


def t(text: str) -> float:
    """Seconds from the test world's start (Mon 2025-06-02 08:00 Berlin) to a local time."""
    return times.parse_instant(text, BERLIN) - times.parse_instant("2025-06-02T08:00", BERLIN)


async def test_every_wake_source_arrives_with_its_task_time(tmp_path: Path) -> None:
    env = make_env(tmp_path, {
        "end": "P1D",
        "apps": [{"kind": "inbox", "state": {"address": "dana@example.com"}}],
        "contacts": [{"name": "venue", "replies": ["Saturday is free."], "delay": "PT2H",
                      "app": "inbox", "address": "events@venue.example"}],
        "triggers": [
            {"name": "ask-venue", "on_tool": "send_email",
             "actions": [{"kind": "reply", "contact": "venue"}]},
            {"name": "calendar", "at": "2025-06-02T09:30",
             "actions": [{"kind": "notify", "source": "calendar", "text": "Dentist moved"}]}],
        "lines": [{"at": "2025-06-02T18:00", "text": "Any news from the venue?"}],
        "tasks": [{"prompt": "Ask the venue about Saturday."}]},
        user={"answers": [{"text": "Great, thanks"}], "reply_delays": {"free": "PT10M"}},
        always_on={"checks": True})
    agent = Agent(by_pattern({
        "Ask the venue": ScriptedReply.calls([
            ("send_email", {"to": "events@venue.example", "subject": "Party",
                            "body": "Is Saturday free?"}),
            ("schedule_check", {"note": "venue answered?", "after": "PT5H"})]),
        "Email from venue": say("The venue says Saturday is free."),
    }, default=quiet()))
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    got = [(s["kind"], s["due_t"]) for w in wakes(episode) for s in w["sources"]
           if s["from"] != "step"]
    assert got == [("opening", 0.0), ("alert", t("2025-06-02T09:30")),
                   ("contact_reply", t("2025-06-02T10:00")),
                   ("user_reply", t("2025-06-02T10:10")),
                   ("check", t("2025-06-02T13:00")), ("line", t("2025-06-02T18:00"))]
    # Each line carries its task time in the user's zone.
    assert "[Mon 2025-06-02 08:00 Europe/Berlin] Dana (the user) wrote: Ask the venue" in \
        agent.wakes[0]
    assert "[Mon 2025-06-02 09:30 Europe/Berlin] Alert from calendar: Dentist moved" in \
        agent.wakes[1]
    assert "Email from venue <events@venue.example>: Saturday is free." in agent.wakes[2]
    assert "Dana (the user) replied to your message #1: Great, thanks" in agent.wakes[3]
    assert "Your check #1 is due: venue answered?" in agent.wakes[4]
    ao = episode.results["always_on"]
    assert ao["summary"]["counts"]["late_events"] == 0
    assert ao["end_reason"] == "end_time"


async def test_jumps_go_in_order_and_never_past_an_event(tmp_path: Path) -> None:
    triggers = [{"name": f"a{i}", "at": f"2025-06-0{2 + i % 3}T{9 + i:02d}:{i * 7 % 60:02d}",
                 "actions": [{"kind": "notify", "text": f"alert {i}"}]} for i in range(8)]
    env = make_env(tmp_path, {"end": "P4D", "triggers": triggers})
    episode = await run(env, Agent(lambda text: quiet()))
    entries = timeline(episode)
    ts = [e["t"] for e in entries]
    assert ts == sorted(ts)  # the timeline never goes back
    due_times = sorted(t(x["at"]) for x in triggers)
    jump_targets = [t(e["to"]) for e in timeline(episode, "jump")]
    # Every jump lands on an event (or the end) and no event's time is jumped over.
    assert set(due_times) <= set(jump_targets)
    assert all(target in due_times or target == t("2025-06-06T08:00")
               for target in jump_targets)
    for wake in wakes(episode):
        for source in wake["sources"]:
            if "due_t" in source:
                assert wake["t"] == source["due_t"]


async def test_she_reads_when_free_after_work_and_on_waking(tmp_path: Path) -> None:
    env = make_env(tmp_path, {
        "end": "P2D",
        "triggers": [{"name": "at-work", "at": "2025-06-02T10:00", "actions": [
                         {"kind": "notify", "text": "work"}]},
                     {"name": "night", "at": "2025-06-02T23:30", "actions": [
                         {"kind": "notify", "text": "night"}]},
                     {"name": "evening", "at": "2025-06-02T19:00", "actions": [
                         {"kind": "notify", "text": "evening"}]}]},
        user={"awake": ["07:00", "23:00"],
              "busy": [{"start": "09:00", "end": "17:00", "days": ["weekdays"]}],
              "reply_delays": {"free": "PT5M", "busy": "PT20M", "woken": "PT1H"},
              "answers": [{"text": "ok"}]})
    agent = Agent(by_pattern({"Alert from": say("news")}, default=quiet()))
    episode = await run(env, agent)
    replies = episode.results["always_on"]["replies"]
    got = [(r["mode"], r["read_t"], r["wrote_t"]) for r in replies if not r["last_read"]]
    assert got == [
        ("busy", t("2025-06-02T17:00"), t("2025-06-02T17:20")),    # sent at work
        ("free", t("2025-06-02T19:00"), t("2025-06-02T19:05")),    # sent in the evening
        ("woken", t("2025-06-03T07:00"), t("2025-06-03T08:00"))]   # sent at night
    # Her replies reach the agent at the time she wrote them.
    assert [r["reached_t"] for r in replies if not r["last_read"]] == [g[2] for g in got]


async def test_a_read_due_while_the_turn_runs_on_happens_at_its_time(tmp_path: Path) -> None:
    """A turn that runs past her bedtime neither delays her read nor makes her answer at
    night: she reads the message when it is sent, before 23:00, and her reply lands then."""
    # A real second of the agent's turn is an hour: the message goes out at 22:30 plus the
    # first model call's real time, and the turn's second call (0.75 s, 45 minutes) ends it
    # after 23:00.
    env = make_env(tmp_path, {
        "end": "P2D", "rate": 3600.0,
        "triggers": [{"name": "late", "at": "2025-06-02T22:30", "actions": [
            {"kind": "notify", "text": "late"}]}]},
        user={"awake": ["07:00", "23:00"], "reply_delays": {"free": "PT5M", "woken": "PT30M"},
              "answers": [{"text": "thanks, good night"}]})
    agent = Agent(by_pattern({"Alert from": say("it is late")}, default=quiet()),
                  after_tools=ScriptedReply.text("thinking", latency_s=0.75))
    episode = await run(env, agent)
    assert not timeline(episode, "read_deferred")
    ao = episode.results["always_on"]
    sent, first = ao["response"][0], ao["replies"][0]
    assert (first["mode"], first["read_t"]) == ("free", sent["t"])
    assert first["read_t"] < t("2025-06-02T23:00")
    assert first["wrote_t"] == pytest.approx(first["read_t"] + 300, abs=1e-6)
    [reply] = [s for w in wakes(episode) for s in w["sources"] if s["kind"] == "user_reply"]
    assert reply["late"] and reply["due_t"] == first["wrote_t"]
    assert wakes(episode)[0]["end_t"] > t("2025-06-02T23:00")


def test_reply_delays_without_a_schedule_are_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(InterplayError, match=r"reply_delays\.busy is set but the schedule has "
                                             r"no busy blocks"):
        make_env(tmp_path, {"end": "P1D"}, user={"reply_delays": {"busy": "PT10M"}})
    with pytest.raises(InterplayError, match=r"reply_delays\.woken .* no awake hours"):
        make_env(tmp_path, {"end": "P1D"}, user={"reply_delays": {"woken": "PT10M"}})


def test_a_user_zone_unknown_or_other_than_the_worlds_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InterplayError, match="unknown time zone 'Atlantis/Main'"):
        make_env(tmp_path, {"end": "P1D"}, user={"timezone": "Atlantis/Main"})
    with pytest.raises(InterplayError, match="disagrees with the world's 'Europe/Berlin'"):
        make_env(tmp_path, {"end": "P1D"}, user={"timezone": "Asia/Tokyo"})


async def test_what_is_due_in_one_minute_arrives_in_one_wake(tmp_path: Path) -> None:
    env = make_env(tmp_path, {
        "end": "P1D",
        "triggers": [{"name": n, "at": at, "actions": [{"kind": "notify", "text": n}]}
                     for n, at in (("a", "2025-06-02T10:00:05"), ("b", "2025-06-02T10:00:40"),
                                   ("c", "2025-06-02T10:01:10"))],
        "lines": [{"at": "2025-06-02T10:00:50", "text": "and one more thing"}]})
    episode = await run(env, Agent(lambda text: quiet()))
    woke = [[s.get("text") for s in w["sources"] if s["from"] != "step"]
            for w in wakes(episode)]
    assert woke[0:2] == [["a", "b", "and one more thing"], ["c"]]
    assert wakes(episode)[0]["t"] == t("2025-06-02T10:00:50")
    assert episode.results["always_on"]["summary"]["counts"]["late_events"] == 0


async def test_fires_of_a_reply_trigger_run_side_by_side(tmp_path: Path) -> None:
    env = make_env(tmp_path, {
        "end": "P1D",
        "apps": [{"kind": "inbox"}],
        "contacts": [{"name": "venue", "replies": ["first answer", "second answer"],
                      "delay": ["PT1H", "PT2H"]}],
        "triggers": [{"name": "ask", "on_tool": "send_email", "actions": [
            {"kind": "notify", "to": "phone", "text": "sent {fire}"},
            {"kind": "reply", "contact": "venue", "wait": "PT10M"}]}],
        "tasks": [{"prompt": "ask twice"}]})
    agent = Agent(by_pattern({"ask twice": ScriptedReply.calls([
        ("send_email", {"to": "a@venue.example", "subject": "one", "body": "?"}),
        ("send_email", {"to": "a@venue.example", "subject": "two", "body": "?"})])},
        default=quiet()))
    episode = await run(env, agent)
    fires = timeline(episode, "fire")
    assert [(f["fire"], f["queued"]) for f in fires] == [(1, False), (2, False)]
    asked = timeline(episode, "contact_asked")
    assert [a["t"] for a in asked] == [600.0, 600.0]  # each fire waited its own 10 minutes
    replies = [s for w in wakes(episode) for s in w["sources"] if s["kind"] == "contact_reply"]
    assert sorted(s["text"] for s in replies) == ["first answer", "second answer"]


async def test_settling_waits_for_contacts_up_to_their_limit(tmp_path: Path) -> None:
    env = make_env(tmp_path, {
        "end": "P1D",
        "apps": [{"kind": "inbox"}],
        "contacts": [{"name": "friend", "persona": "Alex, an old friend", "delay": "PT30M",
                      "limit_s": 5.0},
                     {"name": "slow", "persona": "never answers in time", "delay": "PT30M",
                      "limit_s": 0.3}],
        "triggers": [{"name": "mail", "on_tool": "send_email", "actions": [
            {"kind": "reply", "contact": "friend", "message": "{args.body}"},
            {"kind": "reply", "contact": "slow"}]}],
        "tasks": [{"prompt": "write to Alex"}]})

    def contact(request: Any) -> ScriptedReply:
        slow = "never answers" in str(request.messages[0]["content"])
        return ScriptedReply.text("too late" if slow else "Sure, count me in!",
                                  latency_s=2.0 if slow else 0.3)

    agent = Agent(by_pattern({"write to Alex": ScriptedReply.tool_call(
        "send_email", {"to": "alex@example.com", "subject": "party", "body": "Saturday?"})},
        default=quiet()), contact=contact)
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    kinds = [e["kind"] for e in timeline(episode)]
    assert "contact_timed_out" in kinds
    assert episode.results["always_on"]["real"]["settled_calls"] >= 1  # slow was computing
    [reply] = [s for w in wakes(episode) for s in w["sources"] if s["kind"] == "contact_reply"]
    assert reply["text"] == "Sure, count me in!" and reply["due_t"] == 1800.0
    assert not reply["late"]
    friend = episode.trace("contact:friend")
    assert friend.messages[1].content == "Saturday?" and not friend.trainable
    counts = episode.results["always_on"]["summary"]["counts"]
    assert counts["contact_timeouts"] == 1 and counts["contact_replies"] == 1


async def test_a_wake_that_wrote_to_nobody_gets_one_nudge(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "hello"}, {"prompt": "hi"}]})
    agent = Agent(by_pattern({"hello": "Hi Dana, how can I help?", "private note": say("Hi!"),
                              "hi": "   "}))
    episode = await run(env, agent)
    first = wakes(episode)[0]
    assert first["nudged"] and first["sent"] == [1]
    assert first["private_note"] == "Hi Dana, how can I help?"
    nudge = agent.requests[1]
    assert "[always_on] Your reply above is a private note" in nudge.messages[-1]["content"]
    assert nudge.body["tool_choice"] == "required"
    assert "tool_choice" not in agent.requests[2].body  # the call after the tool result
    # A blank reply gets no nudge.
    episode = await run(env, agent, task_idx=1)
    assert not wakes(episode)[0]["nudged"]


@pytest.mark.parametrize(("after", "led_to", "sent"), [
    (say("Hi!"), "message", [1]), (quiet(), "stay_quiet", []),
    (ScriptedReply.tool_call("get_time", {}), "tools", []),
    ("still just thinking", "reply", []), ("  ", "nothing", [])])
async def test_the_wake_records_what_its_nudge_led_to(tmp_path: Path, after: Any, led_to: str,
                                                      sent: list[int]) -> None:
    env = make_env(tmp_path, {"end": "P1D", "tasks": [{"prompt": "hello"}]})
    agent = Agent(by_pattern({"hello": "Hi Dana, how can I help?", "private note": after}))
    episode = await run(env, agent)
    nudge = wakes(episode)[0]["nudge"]
    assert (nudge["led_to"], nudge["sent"]) == (led_to, sent)
    assert episode.results["always_on"]["summary"]["nudges_led_to"] == {led_to: 1}


async def test_the_rules_go_in_the_system_prompt_or_open_the_first_wake(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D", "tasks": [
        {"prompt": "one"}, {"prompt": "two", "system_prompt": "You help Dana."}]},
        always_on={"deny_tools": ["*"], "checks": False})
    agent = Agent(lambda text: quiet())
    await run(env, agent)
    first = agent.requests[0]
    assert first.messages[0]["role"] == "user"
    assert first.messages[0]["content"].startswith("[always_on] You are Dana's always-on")
    tools = {tool["function"]["name"] for tool in first.body["tools"]}
    assert "get_time" in tools and "schedule_check" not in tools  # get_time stays
    agent.requests.clear()
    await run(env, agent, task_idx=1)
    system = agent.requests[0].messages[0]
    assert system["role"] == "system" and system["content"].startswith("You help Dana.")
    assert "message_user" in system["content"]
    assert not agent.requests[0].messages[1]["content"].startswith("[always_on]")


async def test_a_read_never_holds_what_is_meant_for_the_agent(tmp_path: Path) -> None:
    secrets = {k: f"SENTINEL-{k.upper()}-{i}" for i, k in enumerate(
        ("system", "alert", "note", "tool", "contact", "line"))}
    env = make_env(tmp_path, {
        "end": "P1D",
        "apps": [{"kind": "notes", "state": {"notes": [{"id": "n0", "text": secrets["tool"]}]}}],
        "contacts": [{"name": "venue", "replies": [secrets["contact"]], "delay": "PT1H"}],
        "triggers": [{"name": "a", "after": "PT1M", "actions": [
            {"kind": "notify", "text": secrets["alert"]},
            {"kind": "reply", "contact": "venue", "message": "x"}]}],
        "tasks": [{"prompt": "go", "system_prompt": secrets["system"]}]},
        user={"answers": [{"text": "fine"}]})
    agent = Agent(by_pattern({"go": ScriptedReply.tool_call("list_notes", {}),
                              "SENTINEL-ALERT": say("the one thing you may read"),
                              "SENTINEL-CONTACT": say("another thing for you")},
                             default=quiet()),
                  after_tools=f"private {secrets['note']}")
    episode = await run(env, agent)
    assert episode.error is None
    assert len(support.READS) >= 2
    dumped = json.dumps([attrs.asdict(r) for r in support.READS])
    assert "the one thing you may read" in dumped
    for where, secret in secrets.items():
        if where != "line":
            assert secret not in dumped, f"the {where} reached the user's read"
    # Nor is any of it in the chat graders read, save her own lines and the agent's messages.
    conversation = json.dumps(episode.results["always_on"]["conversation"])
    for where in ("system", "alert", "note", "tool", "contact"):
        assert secrets[where] not in conversation


async def test_a_message_another_seat_queued_is_kept_out_of_her_reads(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"end": "P1D", "queued": [{"text": "from before", "seat": "old"}],
                              "tasks": [{"prompt": "greet me"}]},
                   user={"answers": [{"text": "hi! what is new?"}]})
    episode = await run(env, Agent(by_pattern({"greet me": say("hello")}, default=quiet())))
    # She reads the agent's message alone: another seat's is not this run's to answer, so
    # her reply can only be to the agent (the only message she read).
    first = support.READS[0]
    assert [(m.number, m.seat) for m in first.messages] == [(2, "assistant")]
    ao = episode.results["always_on"]
    assert ao["replies"][0]["reply_to"] == 2
    assert [r["text"] for r in ao["response"]] == ["hello"]
    assert ao["queued_by_others"] == [{"n": 1, "seat": "old", "text": "from before",
                                       "at": "2025-06-02T08:00:00+02:00", "t": 0.0}]
    counts = ao["summary"]["counts"]
    assert counts["queued_by_others"] == 1
    # Neither pending nor in the graded chat: the run did not leave it unread.
    assert ao["summary"]["pending"]["unread_by_user"]["count"] == 0
    assert ao["end_reason"] != "stuck"
    assert "from before" not in json.dumps(ao["conversation"])


async def test_jumps_and_app_changes_fold(tmp_path: Path) -> None:
    env = make_env(tmp_path, {
        "end": "P2D",
        "apps": [{"kind": "notes"}],
        "triggers": [
            {"name": "tick", "every": "PT1H", "actions": [
                {"kind": "notify", "to": "phone", "text": "tick"}]},
            {"name": "flood", "at": "2025-06-02T09:00", "actions": [
                {"kind": "tool", "app": "notes", "tool": "add_note", "args": {"text": "x"}}
                for _ in range(230)] + [{"kind": "notify", "text": "flooded"}]}]})
    episode = await run(env, Agent(lambda text: quiet()))
    entries = timeline(episode)
    folded = [e for e in entries if e["kind"] == "jumps_folded"]
    assert folded and all(f["count"] > 0 for f in folded)
    # Between two wakes at most 20 jumps are listed.
    gap = 0
    for e in entries:
        if e["kind"] == "wake":
            gap = 0
        elif e["kind"] == "jump":
            gap += 1
            assert gap <= 20
    [changes] = [e for e in entries if e["kind"] == "changes_folded"]
    assert changes["count"] == 30
    assert sum(e["kind"] == "change" for e in entries) == 200
    counts = episode.results["always_on"]["summary"]["counts"]
    assert counts["app_changes"] == 230 and counts["clock_jumps"] > 40


def test_what_her_reply_answers() -> None:
    from interplay.builtin_envs.user_sim_step import reply_target
    from interplay.contracts.usersim import Answer
    from interplay.world.chat import Sent

    def sent(number: int, text: str) -> Sent:
        return Sent(number=number, text=text, seat="assistant", at_us=0, wake=1, phase="turn")

    two = [sent(3, "I booked the table."), sent(4, "Shall I invite Alex?")]
    assert reply_target(Answer("yes", replying_to=3), two) == 3          # the number she names
    assert reply_target(Answer("yes", replying_to=9), two) == 4          # unknown: the question
    assert reply_target(Answer("ok", replying_to="booked the"), two) == 3  # a quote
    assert reply_target(Answer("ok"), two) == 4                           # the only question
    assert reply_target(Answer("ok"), two[:1]) == 3                       # the only message
    assert reply_target(Answer("ok"), [sent(1, "a?"), sent(2, "b?")]) is None


async def test_the_relay_reads_go_through_the_same_contract() -> None:
    """A user sim written for always_on reads ``read.messages`` in the relay too."""
    from interplay.builtin_envs.steps import RelayConfig
    from interplay.plugins import host as plugins
    from interplay.testing import run_scripted

    env_cls = plugins.get("envs", "user-sim")
    env = env_cls(env_cls.Config(relay=RelayConfig(user_sim="script", user_sim_settings={
        "answers": [{"text": "hello"}, {"text": "bye", "done": True}]})))
    support.READS.clear()
    await run_scripted(env, next(iter(env.tasks())), ["hi there"])
    opening, reply = support.READS
    assert opening.text is None and opening.messages == ()
    assert [(m.number, m.text) for m in reply.messages] == [(1, "hi there")]
    assert reply.done_ends_run and not reply.last_read and reply.render() == "hi there"


async def test_an_answer_may_say_when_she_writes_it_and_why_she_is_done(tmp_path: Path) -> None:
    start = times.parse_instant("2025-06-02T08:00", BERLIN)
    env = make_env(tmp_path, {"end": "PT12H", "tasks": [{"prompt": "go"}]},
                   user={"reply_delays": {"free": "PT5M"}, "answers": [
                       {"text": "later", "at": start + 3 * 3600},
                       {"text": "bye", "done": True, "done_reason": "stop", "at": start - 60}]})
    episode = await run(env, Agent(by_pattern({"go": say("hi"), "later": say("ok?")})))
    first, second = episode.results["always_on"]["replies"][:2]
    # At the time the answer names, not after her reply delay; a time already past is the
    # read's own.
    assert (first["read_t"], first["wrote_t"]) == (0.0, t("2025-06-02T11:00"))
    assert second["wrote_t"] == second["read_t"]
    assert (second["done"], second["done_reason"]) == (True, "stop")


class Hands(UserSim):
    """Calls her own tool at each read and says which tools she has."""

    name = "hands"

    def seats(self) -> set[str]:
        return {"user"}

    async def setup(self, person: Any, ctx: Any) -> None:
        await super().setup(person, ctx)
        self.tools = {tool.name: tool for tool in ctx.agent("user").tools}

    async def answer(self, read: Read) -> Answer:
        await self.tools["add_note"].fn(text="from her")
        return Answer(f"tools: {sorted(self.tools)}")


async def test_her_own_tools_change_the_world_as_the_user(tmp_path: Path,
                                                          register_plugin: Any) -> None:
    """Dual control: the user_sim step's tools are on her seat's agent; her changes count as
    made by ``user``, and a state trigger can watch for them."""
    register_plugin(types.SimpleNamespace(
        register_user_sims=hookimpl(lambda register: register(Hands))), "hands")
    env = make_env(tmp_path, {
        "end": "PT6H", "tasks": [{"prompt": "go"}],
        "apps": [{"kind": "notes"}, {"kind": "calendar"}],
        "triggers": [{"name": "hers", "on_change": {"app": "notes", "by": "user"},
                      "actions": [{"kind": "notify", "text": "she wrote a note"}]}]},
        user={"user_sim": "hands", "tools": ["add_note"]})
    episode = await run(env, Agent(by_pattern({"go": say("hi")}, default=quiet())))
    record = episode.results["always_on"]
    assert record["replies"][0]["text"] == "tools: ['add_note']"
    changes = [e for e in record["timeline"] if e["kind"] == "change"]
    assert [(c["action"], c["by"]) for c in changes][:1] == [("note_added", "user")]
    assert any(s.get("text") == "she wrote a note" for w in wakes(episode) for s in w["sources"])
    assert [e["name"] for e in record["timeline"] if e["kind"] == "user_tool"][:1] == [
        "add_note"]


async def test_her_model_is_sent_her_latest_exchanges_within_its_budget(tmp_path: Path) -> None:
    # A month of reads outgrew the embedded model's window in the llm sim's own chat: she is
    # sent her system prompt, as many of her latest exchanges as fit, and the read at hand.
    env = make_env(tmp_path, {"end": "P1D", "triggers": [
        {"name": f"a{h}", "at": f"2025-06-02T{h:02d}:00", "actions": [
            {"kind": "notify", "text": f"news {h}"}]} for h in range(9, 15)]},
        user={"user_sim": "llm", "user_sim_settings": {"max_context_tokens": 400}})
    sent: list[list[dict[str, Any]]] = []

    def user(request: Any) -> str:
        sent.append(request.messages)
        return f"ok, thanks ({len(sent)})"

    agent = Agent(by_pattern({"news": say("there is news")}), user=user)
    episode = await run(env, agent)
    assert episode.error is None, episode.error
    whole = episode.trace("user").messages
    assert len(sent) == 7 and len(whole) == 1 + 2 * 7  # six reads and her wrap-up
    last = sent[-1]
    assert last[0]["role"] == "system" and last[-1]["role"] == "user"
    assert 3 <= len(last) < len(whole)  # fewer than all, more than the read alone
    assert last[1]["content"] == whole[len(whole) - len(last)].content  # the latest kept
    assert sum(len(json.dumps(m)) for m in last) <= 400 * 2.5
    # Her whole conversation stays in her trace, each call records what it was sent.
    assert [m.content for m in whole[-2:]] == [last[-1]["content"], "ok, thanks (7)"]
