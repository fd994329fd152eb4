"""The report: ``interplay report DIR`` turns a results folder into one HTML page a person reads.

Owns rendering ``DIR/report.html`` from ``config.json``, ``summary.json`` and
``episodes.jsonl``: the summary figures, a filterable table of episodes, and each episode's
transcript per seat (tool calls, user turns, rewards, the verifiers' reasons). The page is
self-contained (inline CSS and JS, no network). Every piece of text from a run is escaped with
``html.escape`` and the embedded JSON cannot close its ``<script>`` element, so a transcript
holding markup shows it as text. It does not run anything or change the results.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from interplay.errors import InterplayError

REPORT_FILE = "report.html"


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def safe_json(data: Any) -> str:
    """JSON for inside a ``<script>`` element: no ``<``, ``>`` or ``&`` survives, so neither
    ``</script>`` nor ``<!--`` can end the element early. NaN and infinities (which
    ``JSON.parse`` rejects) become null."""
    try:
        text = json.dumps(data, ensure_ascii=False, default=repr, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(data), ensure_ascii=False, default=repr, allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _finite(data: Any) -> Any:
    """``data`` with every non-finite float replaced by None."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(value) for value in data]
    return data


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                parts.append(str(part.get("text", "")) if "text" in part
                             else json.dumps(part, ensure_ascii=False))
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, default=repr)


def _pretty_args(arguments: Any) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)


# -- pieces ------------------------------------------------------------------------------------


def _figure(label: str, value: str, cls: str = "") -> str:
    return (f'<div class="figure {cls}"><div class="value">{esc(value)}</div>'
            f'<div class="label">{esc(label)}</div></div>')


def _kv_table(title: str, rows: Iterable[tuple[Any, Any]], cls: str = "") -> str:
    body = "".join(f"<tr><td>{esc(k)}</td><td class=num>{esc(_fmt(v))}</td></tr>"
                   for k, v in rows)
    if not body:
        return ""
    return f'<div class="kv {cls}"><h3>{esc(title)}</h3><table>{body}</table></div>'


def render_summary(summary: Mapping[str, Any]) -> str:
    reward = _fmt(summary.get("reward_mean"))
    if summary.get("reward_stderr") is not None:
        reward += f" ± {summary['reward_stderr']:.3g}"
    expected = summary.get("expected")
    episodes = f"{summary.get('episodes', 0)}" + (f" / {expected}" if expected else "")
    tokens = summary.get("tokens") or {}
    figures = [
        _figure("episodes", episodes, "episodes"),
        _figure("mean reward ± se", reward, "reward"),
        _figure("episodes with errors", str(summary.get("error_episodes", 0)), "errors"),
        _figure("tokens", f"{tokens.get('total_tokens', 0):,}", "tokens"),
        _figure("model calls", f"{summary.get('model_calls', 0):,}", "calls"),
    ]
    if summary.get("wall_s") is not None:
        figures.append(_figure("wall time (last session)", f"{summary['wall_s']:.1f} s", "wall"))
    passk = [(f"pass@{k}", v) for k, v in (summary.get("pass_at_k") or {}).items()]
    passk += [(f"pass^{k}", v) for k, v in (summary.get("pass_hat_k") or {}).items()]
    tables = [
        _kv_table(f"pass (reward ≥ {_fmt(summary.get('pass_threshold'))})", passk, "passk"),
        _kv_table("metrics (mean)", (summary.get("metrics") or {}).items(), "metrics"),
        _kv_table("stop conditions", (summary.get("stop_conditions") or {}).items(), "stops"),
        _kv_table("errors", (summary.get("errors") or {}).items(), "errtypes"),
        _kv_table("tokens", tokens.items(), "tokentable"),
    ]
    note = ""
    if summary.get("interrupted") or not summary.get("complete", True):
        note = ('<p class="warn">This run is incomplete; continue it with '
                '<code>interplay eval --resume DIR</code>.</p>')
    return (f'<section id="summary"><div class="figures">{"".join(figures)}</div>{note}'
            f'<div class="tables">{"".join(tables)}</div></section>')


def _episode_stops(ep: Mapping[str, Any]) -> list[str]:
    return [f"{t.get('seat') or t.get('agent')}: {t.get('stop_condition')}"
            for t in ep.get("traces") or ()]


def _task_label(task: Mapping[str, Any]) -> str:
    prompt = task.get("prompt")
    if isinstance(prompt, list):
        prompt = " ".join(_content_text(m.get("content")) for m in prompt
                          if isinstance(m, Mapping))
    text = " ".join(str(prompt or "").split())
    return text[:90] + ("…" if len(text) > 90 else "")


def render_rows(episodes: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for i, ep in enumerate(episodes):
        info = ep.get("info") or {}
        reward = ep.get("reward")
        stops = _episode_stops(ep)
        calls = sum(len(t.get("model_calls") or ()) for t in ep.get("traces") or ())
        turns = (ep.get("metrics") or {}).get("turns")
        rows.append(
            f'<tr class="ep-row" tabindex="0" data-index="{i}" '
            f'data-episode="{esc(info.get("episode_id"))}" '
            f'data-reward="{esc("" if reward is None else reward)}" '
            f'data-error="{esc(ep.get("error_type") or "")}" '
            f'data-stops="{esc(json.dumps(stops, ensure_ascii=False))}">'
            f'<td class=num>{esc(info.get("task_idx"))}</td>'
            f'<td class=num>{esc(info.get("rollout"))}</td>'
            f'<td class="num reward">{esc(_fmt(reward))}</td>'
            f'<td class="err">{esc(ep.get("error_type") or "")}</td>'
            f'<td>{esc(", ".join(stops))}</td>'
            f'<td class=num>{esc(_fmt(turns))}</td>'
            f'<td class=num>{calls}</td>'
            f'<td class=num>{esc(_fmt(ep.get("wall_s"), 3))}</td>'
            f'<td class="task">{esc(_task_label(ep.get("task") or {}))}</td></tr>')
    return "".join(rows)


def _message(m: Mapping[str, Any]) -> str:
    role = str(m.get("role") or "?")
    parts = [f'<div class="msg role-{esc(role)}"><div class="who">{esc(role)}'
             + (f' · {esc(m["name"])}' if m.get("name") else "")
             + (f' · result of {esc(m["tool_call_id"])}' if m.get("tool_call_id") else "")
             + "</div>"]
    text = _content_text(m.get("content"))
    if text:
        parts.append(f'<pre class="text">{esc(text)}</pre>')
    for call in m.get("tool_calls") or ():
        fn = call.get("function") or {}
        parts.append(f'<div class="toolcall"><span class="tool">tool call '
                     f'{esc(fn.get("name"))}</span> <span class="id">{esc(call.get("id"))}'
                     f'</span><pre>{esc(_pretty_args(fn.get("arguments")))}</pre></div>')
    parts.append("</div>")
    return "".join(parts)


def _rewards_table(rewards: Sequence[Mapping[str, Any]]) -> str:
    if not rewards:
        return '<p class="muted">no rewards</p>'
    rows = "".join(
        f'<tr><td>{esc(r.get("name"))}</td><td class=num>{esc(_fmt(r.get("value")))}</td>'
        f'<td class=num>{esc(_fmt(r.get("weight")))}</td><td>{esc(r.get("seat") or "")}</td>'
        f'<td class="reason">{esc(r.get("reason") or "")}</td></tr>' for r in rewards)
    return ('<table class="rewards"><tr><th>verifier</th><th>value</th><th>weight</th>'
            f'<th>seat</th><th>reason</th></tr>{rows}</table>')


def _trace(t: Mapping[str, Any]) -> str:
    calls = t.get("model_calls") or []
    tokens = sum(int((c.get("usage") or {}).get("total_tokens") or 0) for c in calls)
    failed = [c for c in calls if c.get("error_type")]
    head = (f'<h4>{esc(t.get("seat") or t.get("agent"))}'
            f'<span class="muted"> · agent {esc(t.get("agent"))} · harness '
            f'{esc(t.get("harness"))} · model {esc(t.get("model"))}'
            f'{" · trainable" if t.get("trainable") else ""}</span></h4>')
    facts = (f'<p class="facts">stop: <b>{esc(t.get("stop_condition"))}</b> · reward '
             f'{esc(_fmt(t.get("reward")))} · {len(calls)} model calls ({len(failed)} failed) · '
             f'{tokens} tokens · {len(t.get("tool_runs") or ())} tool runs</p>')
    error = (f'<p class="error">{esc(t.get("error_type"))}: {esc(t.get("error"))}</p>'
             if t.get("error_type") else "")
    messages = "".join(_message(m) for m in t.get("messages") or ())
    return (f'<div class="trace" data-seat="{esc(t.get("seat"))}">{head}{facts}{error}'
            f'<div class="messages">{messages}</div>'
            f'<details><summary>rewards for this seat</summary>'
            f'{_rewards_table(t.get("rewards") or ())}</details></div>')


def render_episode(i: int, ep: Mapping[str, Any]) -> str:
    info = ep.get("info") or {}
    task = ep.get("task") or {}
    error = (f'<p class="error">episode error ({esc(ep.get("error_type"))}): '
             f'{esc(ep.get("error"))}</p>' if ep.get("error_type") else "")
    prompt = task.get("prompt")
    prompt_text = (_content_text(prompt) if not isinstance(prompt, list) else
                   "\n".join(f'{m.get("role")}: {_content_text(m.get("content"))}'
                             for m in prompt if isinstance(m, Mapping)))
    task_html = (f'<details class="task"><summary>task {esc(info.get("task_idx"))}</summary>'
                 + (f'<p>system prompt</p><pre>{esc(task.get("system_prompt"))}</pre>'
                    if task.get("system_prompt") else "")
                 + f'<p>prompt</p><pre>{esc(prompt_text or "(none)")}</pre>'
                 f'<p>answer</p><pre>{esc(json.dumps(task.get("answer"), ensure_ascii=False))}'
                 f'</pre></details>')
    results = ""
    if ep.get("results"):
        results = (f'<details><summary>env results</summary><pre>'
                   f'{esc(json.dumps(ep["results"], indent=2, ensure_ascii=False, default=repr))}'
                   f'</pre></details>')
    metrics = ", ".join(f"{k} = {_fmt(v)}" for k, v in (ep.get("metrics") or {}).items())
    traces = "".join(_trace(t) for t in ep.get("traces") or ())
    return (f'<section class="episode" id="ep-{i}" data-episode="{esc(info.get("episode_id"))}"'
            f' hidden><h2>Episode {esc(info.get("episode_id"))}: task '
            f'{esc(info.get("task_idx"))}, rollout {esc(info.get("rollout"))}</h2>'
            f'<p class="facts">reward <b class="ep-reward">{esc(_fmt(ep.get("reward")))}</b>'
            f' · seed {esc(info.get("seed"))} · {esc(_fmt(ep.get("wall_s"), 3))} s'
            f'{" · " + esc(metrics) if metrics else ""}</p>{error}'
            f'<h3>Rewards</h3>{_rewards_table(ep.get("rewards") or ())}{task_html}{results}'
            f'<h3>Transcript per seat</h3><div class="traces">{traces}</div></section>')


def _options(values: Iterable[str]) -> str:
    return "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in sorted(set(values)))


def render(config: Mapping[str, Any], summary: Mapping[str, Any],
           episodes: Sequence[Mapping[str, Any]], *, title: str = "") -> str:
    """The whole page as text."""
    env_name = str((config.get("env") or {}).get("name") or "run")
    title = title or f"interplay · {env_name}"
    stops = [s for ep in episodes for s in _episode_stops(ep)]
    errors = [str(ep["error_type"]) for ep in episodes if ep.get("error_type")]
    model = config.get("model") or {}
    where = model.get("base_url") or "embedded local model"
    sub = (f'{esc(env_name)} · model {esc(model.get("model"))} at {esc(where)} · '
           f'{esc(config.get("rollouts"))} rollouts · seed {esc(config.get("seed"))}')
    filters = (
        '<div id="filters">'
        '<label>reward <select id="f-reward"><option value="">any</option>'
        '<option value="pass">passed</option><option value="fail">not passed</option>'
        '<option value="none">unscored</option></select></label> '
        '<label>min <input id="f-min" type="number" step="any" size="5"></label> '
        '<label>max <input id="f-max" type="number" step="any" size="5"></label> '
        '<label>error <select id="f-error"><option value="">any</option>'
        '<option value="__none">no error</option><option value="__any">any error</option>'
        f'{_options(errors)}</select></label> '
        '<label>stop condition <select id="f-stop"><option value="">any</option>'
        f'{_options(stops)}</select></label> '
        '<span id="shown"></span></div>')
    table = ('<table id="episodes"><thead><tr><th>task</th><th>rollout</th><th>reward</th>'
             '<th>error</th><th>stop conditions</th><th>turns</th><th>calls</th>'
             f'<th>wall s</th><th>prompt</th></tr></thead><tbody>{render_rows(episodes)}'
             '</tbody></table>')
    details = "".join(render_episode(i, ep) for i, ep in enumerate(episodes))
    data = {"summary": summary, "config": config}
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f'<header><h1>{esc(title)}</h1><p class="muted">{sub}</p></header>'
        f"<main>{render_summary(summary)}"
        f'<section id="list"><h2>Episodes</h2>{filters}{table}</section>'
        f'<div id="details">{details}</div></main>'
        f'<script type="application/json" id="run-data">{safe_json(data)}</script>'
        f"<script>{JS}</script></body></html>")


# -- files -------------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        raise InterplayError(f"{path}: not valid JSON; rerun or resume the eval") from None


def write_report(folder: str | Path) -> Path:
    """Render ``folder/report.html`` from the results there; returns its path."""
    from interplay.run.results import CONFIG_FILE, EPISODES_FILE, SUMMARY_FILE, read_episodes
    from interplay.run.summary import summarize

    out = Path(folder)
    if not (out / EPISODES_FILE).is_file() and not (out / CONFIG_FILE).is_file():
        raise InterplayError(f"{out}: not a results folder (no {EPISODES_FILE}); "
                             f"point `interplay report` at the -o folder of `interplay eval`")
    stored = _read_json(out / CONFIG_FILE) or {}
    config = stored.get("config", {}) if isinstance(stored, Mapping) else {}
    episodes = read_episodes(out / EPISODES_FILE)
    episodes.sort(key=lambda e: (int(e["info"]["task_idx"]), int(e["info"]["rollout"])))
    summary = _read_json(out / SUMMARY_FILE)
    if not isinstance(summary, Mapping) or summary.get("episodes") != len(episodes):
        # No summary yet (a killed run) or an older one: the episodes are the truth.
        summary = summarize(episodes, pass_threshold=float(config.get("pass_threshold", 1.0)))
    page = render(config, summary, episodes)
    path = out / REPORT_FILE
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, path)
    return path


def add_report(sub: Any) -> None:
    p = sub.add_parser("report", help="write DIR/report.html from a results folder",
                       description="Render a results folder of `interplay eval` as one "
                       "self-contained HTML page (no network needed to view it).")
    p.add_argument("dir", help="the results folder")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    path = write_report(args.dir)
    print(f"report: {path}")
    return 0


CSS = """
:root{--fg:#1d232b;--muted:#667085;--line:#d9dee5;--bg:#f7f8fa;--pass:#157f3b;--fail:#b42318;
--accent:#2f5fd0}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;
color:var(--fg);background:var(--bg)}
header{padding:16px 24px;background:#fff;border-bottom:1px solid var(--line)}
h1{margin:0;font-size:20px}h2{font-size:17px;margin:18px 0 8px}h3{font-size:14px;margin:14px 0 6px}
h4{margin:0 0 4px;font-size:14px}main{padding:8px 24px 40px}.muted{color:var(--muted)}
.figures{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.figure{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px 16px;
min-width:150px}.figure .value{font-size:22px;font-weight:600}.figure .label{color:var(--muted)}
.tables{display:flex;flex-wrap:wrap;gap:16px}.kv table{border-collapse:collapse;background:#fff}
.kv td{border:1px solid var(--line);padding:3px 8px}.num{text-align:right;
font-variant-numeric:tabular-nums}
#filters{margin:6px 0 10px;display:flex;gap:14px;flex-wrap:wrap;align-items:center}
#episodes{border-collapse:collapse;width:100%;background:#fff}
#episodes th,#episodes td{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left}
#episodes th{background:#eef1f5;position:sticky;top:0}
.ep-row{cursor:pointer}.ep-row:hover{background:#eef3ff}.ep-row.open{background:#dfe8ff}
.err{color:var(--fail)}td.task{color:var(--muted)}
.episode{background:#fff;border:1px solid var(--line);border-radius:8px;padding:4px 18px 18px;
margin-top:18px}
.trace{border-top:2px solid var(--line);padding-top:10px;margin-top:14px}
.msg{margin:8px 0;padding:6px 10px;border-radius:6px;border-left:4px solid #c5ccd6;
background:#fafbfc}
.msg .who{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
.role-user{border-left-color:#7a5af8;background:#f6f3ff}
.role-assistant{border-left-color:var(--accent);background:#f2f6ff}
.role-tool{border-left-color:#dc6803;background:#fff8ed}.role-system{border-left-color:#98a2b3}
pre{white-space:pre-wrap;word-break:break-word;margin:4px 0;font:13px/1.4 ui-monospace,
SFMono-Regular,Menlo,monospace}
.toolcall{border:1px dashed #dc6803;border-radius:6px;padding:4px 8px;margin:4px 0}
.toolcall .tool{font-weight:600}.toolcall .id{color:var(--muted);font-size:12px}
table.rewards{border-collapse:collapse}table.rewards td,table.rewards th{border:1px solid
var(--line);padding:3px 8px;text-align:left;vertical-align:top}
.error{color:var(--fail);white-space:pre-wrap}.warn{color:#b54708}
"""

JS = r"""
(function(){
  var rows = Array.prototype.slice.call(document.querySelectorAll('tr.ep-row'));
  var data = JSON.parse(document.getElementById('run-data').textContent);
  var threshold = Number(data.summary.pass_threshold);
  if (!isFinite(threshold)) threshold = 1;
  function val(id){ return document.getElementById(id).value; }
  function apply(){
    var r = val('f-reward'), lo = val('f-min'), hi = val('f-max');
    var e = val('f-error'), s = val('f-stop'), shown = 0;
    rows.forEach(function(row){
      var raw = row.dataset.reward, reward = raw === '' ? null : Number(raw);
      var ok = true;
      if (r === 'pass') ok = reward !== null && reward >= threshold;
      if (r === 'fail') ok = reward === null || reward < threshold;
      if (r === 'none') ok = reward === null;
      if (ok && lo !== '') ok = reward !== null && reward >= Number(lo);
      if (ok && hi !== '') ok = reward !== null && reward <= Number(hi);
      if (ok && e === '__none') ok = row.dataset.error === '';
      else if (ok && e === '__any') ok = row.dataset.error !== '';
      else if (ok && e) ok = row.dataset.error === e;
      if (ok && s) ok = JSON.parse(row.dataset.stops).indexOf(s) >= 0;
      row.hidden = !ok;
      if (ok) shown++;
    });
    document.getElementById('shown').textContent = shown + ' of ' + rows.length + ' shown';
  }
  function open(row){
    rows.forEach(function(x){ x.classList.remove('open'); });
    document.querySelectorAll('section.episode').forEach(function(x){ x.hidden = true; });
    row.classList.add('open');
    var section = document.getElementById('ep-' + row.dataset.index);
    section.hidden = false;
    history.replaceState(null, '', '#episode=' + row.dataset.episode);
    section.scrollIntoView();
  }
  rows.forEach(function(row){
    row.addEventListener('click', function(){ open(row); });
    row.addEventListener('keydown', function(ev){ if (ev.key === 'Enter') open(row); });
  });
  ['f-reward','f-min','f-max','f-error','f-stop'].forEach(function(id){
    document.getElementById(id).addEventListener('input', apply);
    document.getElementById(id).addEventListener('change', apply);
  });
  apply();
  function fromHash(){
    var m = /^#episode=(.+)$/.exec(location.hash);
    if (!m) return;
    var want = decodeURIComponent(m[1]);
    rows.forEach(function(row){
      if (row.dataset.episode === want && !row.classList.contains('open')) open(row);
    });
  }
  window.addEventListener('hashchange', fromHash);
  // A page restored from the back/forward cache runs no script again: read the hash then too.
  window.addEventListener('pageshow', fromHash);
  fromHash();
})();
"""
