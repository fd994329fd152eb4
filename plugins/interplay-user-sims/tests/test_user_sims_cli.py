"""The package as a user meets it: installed from its folder, found through its entry point by
the `interplay` command, listed with its package, and run by `interplay eval` (a subprocess)
against the scripted model; `tau` also on the embedded model."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
from user_sims_support import is_user

from interplay.testing import (
    ScriptedModel,
    ScriptedReply,
    ScriptedRequest,
    needs_local_model,
    run_interplay,
)

SIMS = ["busy-person", "replay", "scripted", "tau"]


def test_it_registers_only_through_its_own_entry_point() -> None:
    eps = [ep for ep in importlib.metadata.entry_points(group="interplay")
           if ep.value.startswith("interplay_user_sims")]
    assert [(ep.name, ep.value, ep.dist.name if ep.dist else None) for ep in eps] == [
        ("user_sims", "interplay_user_sims.plugin", "interplay-user-sims")]
    kernel = importlib.metadata.distribution("interplay")
    assert not [ep for ep in kernel.entry_points if "user_sims" in ep.value]


def test_the_kernel_never_imports_it() -> None:
    code = ("import sys; from interplay.plugins import host as plugins; "
            "plugins.reset(load_entry_points=False); plugins.registry(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'interplay_user_sims'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_interplay_plugins_and_list_show_them() -> None:
    out = run_interplay("plugins", "--json")
    assert out.returncode == 0, out.stderr
    (info,) = [i for i in json.loads(out.stdout) if i["name"] == "user_sims"]
    assert info["package"] == "interplay-user-sims" and info["error"] is None
    assert info["registered"] == {"user-sims": ["scripted", "replay", "tau", "busy-person"]}
    assert not info["clashes"]

    listed = run_interplay("list", "user-sims", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert {name: rows[name]["package"] for name in SIMS} == dict.fromkeys(
        SIMS, "interplay-user-sims")
    assert rows["llm"]["package"] == "interplay"
    text = run_interplay("list", "user-sims").stdout
    line = next(x for x in text.splitlines() if x.startswith("tau "))
    assert "tau2-bench user" in line and "[interplay-user-sims]" in line


def assistant_and_tau(request: ScriptedRequest) -> ScriptedReply | str:
    if is_user(request):
        turns = sum(1 for m in request.messages if m["role"] == "user")
        return "When do you open on Saturday?" if turns == 1 else "Thanks! ###STOP###"
    return "From 10 to 16."


@pytest.mark.slow
def test_interplay_eval_with_tau_from_a_toml_file_then_replayed(tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text('[env]\nname = "user-sim"\n[env.relay]\nuser_sim = "tau"\n'
                      'max_turns = 3\n')
    first = tmp_path / "first"
    with ScriptedModel(assistant_and_tau) as model:
        out = run_interplay("eval", "--config", str(config), "-n", "2", "--base-url",
                            model.base_url, "-o", str(first), "-q", "--no-report")
    assert out.returncode == 0, out.stderr
    episodes = [json.loads(line) for line in (first / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 2
    for episode in episodes:
        assert episode["error"] is None
        assert episode["results"]["relay"]["ended_by"] == "user_done"
        assert episode["results"]["relay"]["done_reason"] == "stop"

    # The same user lines against another assistant, with no model behind the user.
    second = tmp_path / "second"
    with ScriptedModel(["Saturday: 10 to 16."]) as model:
        out = run_interplay("eval", "user-sim", "-n", "2", "--base-url", model.base_url,
                            "-o", str(second), "-q", "--no-report",
                            "--set", "env.relay.user_sim=replay",
                            "--set", f"env.relay.user_sim_settings.episodes={first}")
        requests = list(model.requests)
    assert out.returncode == 0, out.stderr
    replayed = [json.loads(line) for line in (second / "episodes.jsonl").read_text().splitlines()]
    assert all(e["results"]["relay"]["user_lines"] == ["When do you open on Saturday?"]
               for e in replayed)
    assert not any(is_user(r) for r in requests)


@pytest.mark.slow
def test_a_missing_replay_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    out = run_interplay("eval", "user-sim", "-n", "1", "--base-url", "http://127.0.0.1:9/v1",
                        "-o", str(tmp_path / "run"), "-q",
                        "--set", "env.relay.user_sim=replay",
                        "--set", f"env.relay.user_sim_settings.episodes={tmp_path / 'none'}")
    assert out.returncode == 2
    assert f"step 'relay': replay: {tmp_path / 'none'} does not exist" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
@needs_local_model[0]
@needs_local_model[1]
def test_interplay_eval_with_tau_on_the_embedded_model(tmp_path: Path) -> None:
    out_dir = tmp_path / "run"
    short = ["sampling.max_tokens=32", "sampling.temperature=0"]
    settings = ["env.relay.user_sim=tau", "env.relay.max_turns=2", "model.timeout_s=900",
                *[f"seats.{seat}.{s}" for seat in ("assistant", "user") for s in short]]
    out = run_interplay("eval", "user-sim", "-n", "1", "-o", str(out_dir), "-q", "--no-report",
                        *[arg for s in settings for arg in ("--set", s)], timeout=3600)
    assert out.returncode == 0, out.stderr
    (episode,) = [json.loads(line) for line in
                  (out_dir / "episodes.jsonl").read_text().splitlines()]
    assert episode["error"] is None, episode["error"]
    assert episode["results"]["relay"]["ended_by"] in {"user_done", "max_turns", "user_empty"}
    user = next(t for t in episode["traces"] if t["seat"] == "user")
    assert user["model_calls"] and all(c["error_type"] is None for c in user["model_calls"])
    assert "Reason for your call" in json.dumps(user["messages"][0])
