// interplay view in the browser: the list of runs (/), and what keeps a run's page (/run,
// the report's page with report.js) current as its episodes land. Both follow the server's
// events (/api/events): nothing is reloaded, and only what changed is asked for again.
(function(){
  var status = document.getElementById('live-status');

  function fmt(x, digits){
    if (x === null || x === undefined) return '-';
    if (typeof x === 'number') return String(Number(x.toPrecision(digits || 4)));
    return String(x);
  }
  // One clock: dates as YYYY-MM-DD, times on 24 hours (HH:MM, HH:MM:SS), in this browser's
  // time zone, whatever its locale (the report's always_on times are the task's own).
  function pad(n){ return (n < 10 ? '0' : '') + n; }
  function when(seconds){
    if (!seconds) return '-';
    var d = new Date(seconds * 1000);
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes());
  }
  function clock(){
    var d = new Date();
    return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }
  function text(el, value){ el.textContent = value; return el; }
  function element(tag, cls, value){
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (value !== undefined) e.textContent = value;
    return e;
  }

  // Events: each message is a list of what changed ({kind: 'runs'}, {kind: 'run', run}).
  function follow(onChange){
    var source = new EventSource('/api/events');
    source.onopen = function(){ status.dataset.connected = '1'; onChange([{kind: 'all'}]); };
    source.onmessage = function(ev){
      var changes;
      try { changes = JSON.parse(ev.data); } catch (e) { return; }
      onChange(changes);
    };
    source.onerror = function(){
      status.dataset.connected = '';
      status.textContent = 'not connected to interplay view (stopped?); retrying';
    };
    // The page going away closes its stream at once (the server holds a slot per page).
    window.addEventListener('pagehide', function(){ source.close(); });
    return source;
  }
  // At most one request of a kind in flight; asked again meanwhile, once more after it.
  function single(fn){
    var busy = false, again = false;
    function go(){
      if (busy) { again = true; return; }
      busy = true;
      Promise.resolve(fn()).catch(function(){}).then(function(){
        busy = false;
        if (again) { again = false; go(); }
      });
    }
    return go;
  }

  // -- the list of runs ---------------------------------------------------------------------
  var runsBody = document.getElementById('runs-body');
  if (runsBody) {
    var cards = [], found = null, seen = {};
    var ticked = {};
    // Each run's row as last drawn, with the card it was drawn from: a row whose card did
    // not change is kept as it is (its tick, its selection), never drawn again.
    var drawn = {};

    var ci = function(c){
      if (c.reading && (c.scored === null || c.scored === undefined)) return 'reading…';
      if (c.reward_mean === null || c.reward_mean === undefined) {
        var seats = Object.keys(c.seat_rewards || {});
        if (seats.length) return seats.map(function(s){ return s + ' ' + fmt(c.seat_rewards[s].mean); }).join(', ');
        return '-';
      }
      var out = fmt(c.reward_mean);
      if (c.reward_interval) out += ' [' + fmt(c.reward_interval[0], 3) + ', ' + fmt(c.reward_interval[1], 3) + ']';
      return out + ' (' + c.scored + ' scored)';
    };
    var kv = function(obj){
      return Object.keys(obj || {}).map(function(k){ return k + ' ' + fmt(obj[k]); }).join(', ') || '-';
    };
    var runRow = function(c){
      var tr = element('tr', 'run-row');
      tr.dataset.run = c.key;
      tr.dataset.state = c.state;
      var box = element('input');
      box.type = 'checkbox';
      box.checked = !!ticked[c.key];
      box.title = 'tick two runs to compare them';
      box.addEventListener('change', function(){
        if (box.checked) ticked[c.key] = 1; else delete ticked[c.key];
        document.getElementById('compare').disabled = Object.keys(ticked).length < 2;
      });
      var td = element('td'); td.appendChild(box); tr.appendChild(td);
      var link = element('a', '', c.key === '.' ? '(this folder)' : c.key);
      link.href = '/run?id=' + encodeURIComponent(c.key);
      td = element('td', 'run'); td.appendChild(link); tr.appendChild(td);
      if (c.label) td.appendChild(element('div', 'run-label', c.label));
      if (c.regraded_from) td.appendChild(element('div', 'muted', 'regrade of ' + c.regraded_from));
      tr.appendChild(element('td', '', c.env));
      tr.appendChild(element('td', '', c.model));
      td = element('td', 'settings');
      Object.keys(c.settings).forEach(function(k){
        var line = element('div', '', k + ' = ' + JSON.stringify(c.settings[k]));
        line.title = line.textContent;
        td.appendChild(line);
      });
      tr.appendChild(td);
      var eps = c.episodes === null || c.episodes === undefined ? '-' : String(c.episodes);
      tr.appendChild(element('td', 'num episodes', eps + (c.expected ? ' / ' + c.expected : '')));
      tr.appendChild(element('td', 'num reward', ci(c)));
      tr.appendChild(element('td', 'num', kv(c.pass_hat_k)));
      td = element('td', 'err', kv(c.errors));
      if (c.bad_lines) td.appendChild(element('div', 'cause', c.bad_lines + ' unreadable line(s)'));
      tr.appendChild(td);
      td = element('td', 'state-' + c.state, c.state);
      td.title = c.state_text;
      tr.appendChild(td);
      tr.appendChild(element('td', '', when(c.started_at)));
      tr.appendChild(element('td', '', c.state === 'running' ? '-' : when(c.ended_at)));
      return tr;
    };
    var drawRuns = function(){
      var want = document.getElementById('f-runs').value.trim().toLowerCase();
      var state = document.getElementById('f-state').value;
      var shown = [], keys = {};
      cards.forEach(function(c){
        keys[c.key] = 1;
        if (found && !found[c.key]) return;
        if (state && c.state !== state) return;
        if (want && (c.key + ' ' + (c.label || '') + ' ' + c.env + ' ' + c.model).toLowerCase().indexOf(want) < 0) return;
        var made = JSON.stringify(c), kept = drawn[c.key];
        if (!kept || kept.made !== made) {
          kept = drawn[c.key] = {made: made, tr: runRow(c)};
          var mark = c.key + ' ' + c.episodes + ' ' + c.state;
          if (seen[c.key] !== undefined && seen[c.key] !== mark) kept.tr.classList.add('updated');
          seen[c.key] = mark;
        }
        shown.push(kept.tr);
      });
      Object.keys(drawn).forEach(function(k){ if (!keys[k]) delete drawn[k]; });
      // Rows put in order where they are not: a kept row stays in the page untouched.
      shown.forEach(function(tr, i){
        if (runsBody.children[i] !== tr) runsBody.insertBefore(tr, runsBody.children[i] || null);
      });
      while (runsBody.children.length > shown.length) runsBody.removeChild(runsBody.lastChild);
      text(document.getElementById('runs-shown'), shown.length + ' of ' + cards.length + ' runs');
      document.getElementById('runs-empty').hidden = cards.length > 0;
    };
    var said = function(){
      status.textContent = 'live: ' + cards.filter(function(c){ return c.state === 'running'; }).length +
        ' running, updated ' + clock();
    };
    var loadRuns = single(function(){
      return fetch('/api/runs').then(function(r){ return r.json(); }).then(function(got){
        cards = got.runs;
        document.getElementById('runs-truncated').hidden = !got.truncated;
        drawRuns();
        said();
      });
    });
    // A run that changed: its line alone is asked for again (the settings that set it apart
    // are kept from the list, which is read again when runs come or go or a config changes).
    var changedRuns = {};
    var loadChanged = single(function(){
      var keys = Object.keys(changedRuns);
      changedRuns = {};
      return Promise.all(keys.map(function(k){
        return fetch('/api/run?run=' + encodeURIComponent(k)).then(function(r){ return r.json(); });
      })).then(function(got){
        var missing = false;
        got.forEach(function(c){
          var i = cards.findIndex(function(old){ return old.key === c.key; });
          if (c.error || i < 0) { missing = true; return; }
          c.settings = cards[i].settings;
          cards[i] = c;
        });
        if (missing) { loadRuns(); return; }
        cards.sort(function(a, b){
          return (b.started_at || 0) - (a.started_at || 0) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);
        });
        drawRuns();
        said();
      });
    });
    ['f-runs', 'f-state'].forEach(function(id){
      document.getElementById(id).addEventListener('input', drawRuns);
      document.getElementById(id).addEventListener('change', drawRuns);
    });
    document.getElementById('compare').addEventListener('click', function(){
      var keys = cards.map(function(c){ return c.key; }).filter(function(k){ return ticked[k]; });
      location.href = '/compare?' + keys.map(function(k){ return 'run=' + encodeURIComponent(k); }).join('&');
    });
    document.getElementById('find').addEventListener('click', function(){
      var task = document.getElementById('f-find-task').value, outcome = document.getElementById('f-find-outcome').value;
      if (task === '') return;
      var said = document.getElementById('find-result');
      said.hidden = false;
      said.textContent = 'reading every run for task ' + task + '…';
      fetch('/api/find?task=' + encodeURIComponent(task) + '&outcome=' + outcome).then(function(r){ return r.json(); })
        .then(function(got){
          if (got.error) { said.textContent = got.error; return; }
          found = {};
          got.runs.forEach(function(r){ found[r.key] = r; });
          said.textContent = 'task ' + task + ' ' + {pass: 'passed', fail: 'failed', any: 'ran'}[outcome] +
            ' in ' + got.runs.length + ' run(s)' + (got.runs.length ? ': ' + got.runs.map(function(r){
              return r.key + ' (rollouts ' + r.rollouts.join(', ') + ')'; }).join('; ') : '');
          document.getElementById('find-clear').hidden = false;
          drawRuns();
        });
    });
    document.getElementById('find-clear').addEventListener('click', function(){
      found = null;
      document.getElementById('find-result').hidden = true;
      document.getElementById('find-clear').hidden = true;
      drawRuns();
    });
    loadRuns();
    follow(function(changes){
      if (changes.some(function(c){ return c.kind !== 'run' || !c.run; })) { loadRuns(); return; }
      changes.forEach(function(c){ changedRuns[c.run] = 1; });
      loadChanged();
    });
    return;
  }

  // -- a run's page -------------------------------------------------------------------------
  var table = JSON.parse(document.getElementById('table-data').textContent).live;
  if (!table) return;
  var figures = single(function(){
    return fetch(table.figures).then(function(r){
      if (!r.ok) throw new Error(r.statusText);
      return r.text();
    }).then(function(html){
      // The run's figures, rendered by the server from the report's template.
      document.getElementById('run-figures').innerHTML = html;
    });
  });
  var state = single(function(){
    return fetch('/api/run?run=' + encodeURIComponent(table.run)).then(function(r){ return r.json(); }).then(function(mine){
      if (mine.error) { status.textContent = mine.error; return; }
      status.className = 'live-status ' + mine.state;
      status.dataset.state = mine.state;
      status.textContent = mine.state_text + ' · ' + fmt(mine.episodes) +
        (mine.expected ? ' of ' + mine.expected : '') + ' episodes · updated ' +
        clock();
    });
  });
  var last = 0, pending = null;
  function changed(){
    // The figures are drawn again at most every two seconds (charts cost the server).
    var wait = Math.max(0, 2000 - (Date.now() - last));
    if (pending) return;
    pending = setTimeout(function(){
      pending = null;
      last = Date.now();
      figures();
      window.interplayTable.refresh();
    }, wait);
  }
  follow(function(changes){
    var mine = changes.some(function(c){ return c.kind === 'all' || (c.kind === 'run' && c.run === table.run); });
    if (mine) { changed(); state(); }
    else if (changes.some(function(c){ return c.kind === 'runs'; })) state();
  });
})();
