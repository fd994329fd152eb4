"""What the scripted model keeps of the requests it receives: the first ones, within a count
and a size of their bodies, or only those a test asks for; every request still counted and
answered, and the latest always at hand, so a long run on it does not grow without bound."""

from __future__ import annotations

import httpx
import pytest

from interplay.testing import ScriptedModel, ScriptedRequest


def ask(model: ScriptedModel, n: int, size: int = 10) -> list[int]:
    with httpx.Client(base_url=model.base_url) as client:
        return [client.post("/chat/completions", json={"messages": [
            {"role": "user", "content": f"q{i} " + "x" * size}]}).status_code
            for i in range(n)]


def test_the_first_requests_are_kept_up_to_the_count_and_every_one_is_answered() -> None:
    with ScriptedModel(lambda r: "ok", keep_requests=3) as model:
        assert ask(model, 7) == [200] * 7
    assert [r.last_user_text().split()[0] for r in model.requests] == ["q0", "q1", "q2"]
    assert (model.received, model.dropped) == (7, 4)
    assert model.last is not None and model.last.last_user_text().startswith("q6")


def test_the_bodies_kept_stay_under_the_byte_bound() -> None:
    # Each body is about 10 KB: a 35 KB bound keeps three of them, whatever the count allows.
    with ScriptedModel(lambda r: "ok", keep_bytes=35_000) as model:
        assert ask(model, 10, size=10_000) == [200] * 10
    assert len(model.requests) == 3 and model.received == 10 and model.dropped == 7


def test_the_default_bounds_hold_a_long_run_to_a_fixed_size() -> None:
    assert (ScriptedModel.KEEP_REQUESTS, ScriptedModel.KEEP_BYTES) == (1000, 16 << 20)
    with ScriptedModel(lambda r: "ok", keep_bytes=200_000) as model:
        assert ask(model, 60, size=5_000) == [200] * 60
    assert sum(len(str(r.body)) for r in model.requests) <= 200_000
    assert model.received == 60 and model.dropped == 60 - len(model.requests)


def test_keep_keeps_only_what_the_test_asks_for() -> None:
    def odd(request: ScriptedRequest) -> bool:
        return int(request.last_user_text().split()[0][1:]) % 2 == 1

    with ScriptedModel(lambda r: "ok", keep=odd) as model:
        assert ask(model, 6) == [200] * 6
    assert [r.last_user_text().split()[0] for r in model.requests] == ["q1", "q3", "q5"]
    assert model.received == 6 and model.dropped == 0


def test_no_bound_keeps_every_request_and_a_bad_bound_is_refused() -> None:
    with ScriptedModel(lambda r: "ok", keep_requests=None, keep_bytes=None) as model:
        assert ask(model, 5) == [200] * 5
    assert len(model.requests) == 5
    with pytest.raises(ValueError, match="keep_requests is -1; give 0 or more"):
        ScriptedModel(keep_requests=-1)
