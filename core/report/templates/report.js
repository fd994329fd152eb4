// The run page's episode table and episodes: one script for the page `interplay report`
// writes (every row in the page, the kept transcripts in it) and the page `interplay view`
// serves (table.live: the rows come a page at a time from the server, filtered and sorted
// there, and an episode's section when it is opened).
(function(){
  function runData(){ return JSON.parse(document.getElementById('run-data').textContent); }
  var table = JSON.parse(document.getElementById('table-data').textContent);
  var live = table.live || null;
  var PAGE = 200;
  var col = {};
  table.columns.forEach(function(name, i){ col[name] = i; });
  var stops = table.stops;            // stop-condition names, by the index a row holds
  var all = table.rows, shown = all, total = all.length, page = 0, sofar = '';
  var sort = {key: 'task', desc: false};
  var body = document.getElementById('episodes-body');
  var asked = 0;                      // the latest request for rows (live): older answers go

  function threshold(){
    var t = Number(runData().summary.pass_threshold);
    return isFinite(t) ? t : 1;
  }
  function fmt(x){
    if (x === null || x === undefined) return '-';
    if (typeof x === 'number') return String(Number(x.toPrecision(4)));
    return String(x);
  }
  function stopsOf(row){ return row[col.stops].map(function(i){ return stops[i]; }); }
  function cell(tr, text, cls){
    var td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  // The reward components given a column of their own: the run's, when it has more than one
  // (one is the reward again), the first COLUMNS of them; every one can be filtered on.
  var COLUMNS = 12;
  function shownComponents(){
    return table.components.length > 1 ? table.components.slice(0, COLUMNS) : [];
  }
  // The columns: a label and, for those a click sorts by, the key (the server's too).
  var headRow = document.getElementById('episodes-head');
  function drawHead(){
    var heads = [['task', 'task'], ['rollout', 'rollout']];
    if (table.seats.length) table.seats.forEach(function(s){ heads.push(['reward ' + s, null]); });
    else heads.push(['reward', 'reward']);
    shownComponents().forEach(function(c){ heads.push([c, 'c:' + c, 'component']); });
    heads = heads.concat([['error', 'error'], ['stop conditions', 'stops'], ['turns', 'turns'],
                          ['calls', 'calls'], ['wall s', 'wall_s'], ['prompt', null]]);
    headRow.textContent = '';
    heads.forEach(function(h){
      var th = document.createElement('th');
      th.textContent = h[0];
      if (h[2]) { th.dataset.kind = h[2]; th.title = h[0]; }
      if (h[1]) {
        th.className = 'sortable';
        th.dataset.sort = h[1];
        th.tabIndex = 0;
        th.title = (h[2] ? h[0] + ': ' : '') + 'sort by ' + (h[2] ? 'it' : h[0]);
        var flip = function(){
          sort = {key: h[1], desc: sort.key === h[1] ? !sort.desc : false};
          page = 0;
          load();
        };
        th.addEventListener('click', flip);
        th.addEventListener('keydown', function(ev){ if (ev.key === 'Enter') flip(); });
      }
      headRow.appendChild(th);
    });
  }
  drawHead();
  function componentOf(row, name){
    var v = (row[col.components] || {})[name];
    return v === undefined ? null : v;
  }
  function markSort(){
    headRow.querySelectorAll('th.sortable').forEach(function(th){
      if (th.dataset.sort === sort.key) th.setAttribute('aria-sort', sort.desc ? 'descending' : 'ascending');
      else th.removeAttribute('aria-sort');
    });
  }

  function rowElement(row){
    var tr = document.createElement('tr');
    tr.className = 'ep-row';
    tr.tabIndex = 0;
    tr.dataset.index = row[col.index];
    tr.dataset.episode = row[col.episode_id];
    tr.dataset.reward = row[col.reward] === null ? '' : String(row[col.reward]);
    tr.dataset.error = row[col.error_type];
    tr.dataset.stops = JSON.stringify(stopsOf(row));
    cell(tr, fmt(row[col.task]), 'num');
    cell(tr, fmt(row[col.rollout]), 'num');
    if (table.seats.length) {
      row[col.seat_rewards].forEach(function(v){ cell(tr, fmt(v), 'num reward'); });
    } else {
      cell(tr, fmt(row[col.reward]), 'num reward');
    }
    var t = threshold();
    shownComponents().forEach(function(c){
      var v = componentOf(row, c);
      cell(tr, fmt(v), 'num component' + (v === null ? '' : v >= t ? ' pass' : ' fail'));
    });
    var err = cell(tr, row[col.error_type], 'err');
    if (row[col.error]) {
      var c = document.createElement('div'); c.className = 'cause';
      c.textContent = row[col.error]; err.appendChild(c);
    }
    cell(tr, stopsOf(row).join(', '));
    cell(tr, fmt(row[col.turns]), 'num');
    cell(tr, fmt(row[col.calls]), 'num');
    cell(tr, fmt(row[col.wall_s]), 'num');
    cell(tr, row[col.prompt], 'task');
    tr.addEventListener('click', function(){ open(row); });
    tr.addEventListener('keydown', function(ev){ if (ev.key === 'Enter') open(row); });
    return tr;
  }

  function draw(rows){
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    var frag = document.createDocumentFragment();
    rows.forEach(function(row){ frag.appendChild(rowElement(row)); });
    body.textContent = '';
    body.appendChild(frag);
    document.getElementById('shown').textContent = shown.length + ' of ' + total + ' shown' + sofar;
    document.getElementById('page-of').textContent = 'page ' + (page + 1) + ' of ' + pages;
    document.getElementById('pager').hidden = pages < 2;
    markSort();
    var current = location.hash.match(/^#episode=(.+)$/);
    if (current) mark(safeDecode(current[1]));
    highlight(body);
  }

  // Search hits: the text searched for, marked where it shows (the table's prompts, an open
  // episode's messages); the marks are taken away when the search changes.
  function unmark(root){
    root.querySelectorAll('mark.hit').forEach(function(m){
      var parent = m.parentNode;
      parent.replaceChild(document.createTextNode(m.textContent), m);
      parent.normalize();
    });
  }
  function highlight(root){
    unmark(root);
    var needle = val('f-text').trim().toLowerCase();
    if (!needle) return 0;
    var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT), nodes = [], n;
    while ((n = walker.nextNode())) {
      if (n.nodeValue.toLowerCase().indexOf(needle) >= 0 && !n.parentNode.closest('script, option, mark')) nodes.push(n);
    }
    var hits = 0;
    nodes.forEach(function(node){
      var text = node.nodeValue, lower = text.toLowerCase(), at = 0, frag = document.createDocumentFragment();
      for (var i = lower.indexOf(needle); i >= 0; i = lower.indexOf(needle, at)) {
        frag.appendChild(document.createTextNode(text.slice(at, i)));
        var m = document.createElement('mark');
        m.className = 'hit';
        m.textContent = text.slice(i, i + needle.length);
        frag.appendChild(m);
        hits++;
        at = i + needle.length;
      }
      frag.appendChild(document.createTextNode(text.slice(at)));
      node.parentNode.replaceChild(frag, node);
    });
    return hits;
  }
  function highlightSection(section){
    var hits = highlight(section);
    var said = section.querySelector('.hits');
    if (!said) {
      said = document.createElement('p');
      said.className = 'hits muted';
      section.insertBefore(said, section.children[1] || null);
    }
    said.hidden = !hits;
    said.textContent = hits ? hits + ' hit' + (hits === 1 ? '' : 's') + ' of "' + val('f-text').trim() + '" marked' : '';
    // Details holding a hit are opened, so the hit shows.
    section.querySelectorAll('mark.hit').forEach(function(m){
      for (var d = m.closest('details'); d; d = d.parentNode.closest('details')) d.open = true;
    });
    return hits;
  }

  function val(id){ return document.getElementById(id).value; }
  function filters(){
    return {task: val('f-task'), rollout: val('f-rollout'), reward: val('f-reward'),
            min: val('f-min'), max: val('f-max'), error: val('f-error'), stop: val('f-stop'),
            component: val('f-component'), outcome: val('f-component') ? val('f-outcome') : '',
            text: val('f-text').trim()};
  }

  // -- the rows: filtered, sorted and paged here (the static page) or by the server (live) --
  var SORTS = {task: function(r){ return r[col.task]; }, rollout: function(r){ return r[col.rollout]; },
               reward: function(r){ return r[col.reward]; }, error: function(r){ return r[col.error_type] || null; },
               stops: function(r){ return stopsOf(r).join(', ') || null; }, turns: function(r){ return r[col.turns]; },
               calls: function(r){ return r[col.calls]; }, wall_s: function(r){ return r[col.wall_s]; }};
  function compare(a, b){
    // Missing values last, whichever way; then the key; then (task, rollout).
    var key = SORTS[sort.key] || SORTS.task;
    if (sort.key.indexOf('c:') === 0) {
      var name = sort.key.slice(2);
      key = function(r){ return componentOf(r, name); };
    }
    var x = key(a), y = key(b);
    if (x === null || x === undefined) { if (!(y === null || y === undefined)) return 1; }
    else if (y === null || y === undefined) return -1;
    else if (x < y) return sort.desc ? 1 : -1;
    else if (x > y) return sort.desc ? -1 : 1;
    return (a[col.task] - b[col.task]) || (a[col.rollout] - b[col.rollout]);
  }
  function textOf(row){
    var section = document.getElementById('ep-' + row[col.index]);
    return ((section ? section.textContent : '') + ' ' + row[col.prompt] + ' ' + row[col.error] +
            ' ' + row[col.episode_id]).toLowerCase();
  }
  function filterHere(f){
    var t = threshold(), text = f.text.toLowerCase();
    return all.filter(function(row){
      var reward = row[col.reward], ok = true, error = row[col.error_type];
      if (f.task !== '') ok = row[col.task] === Number(f.task);
      if (ok && f.rollout !== '') ok = row[col.rollout] === Number(f.rollout);
      if (ok && f.reward === 'pass') ok = reward !== null && reward >= t;
      if (ok && f.reward === 'fail') ok = reward !== null && reward < t;
      if (ok && f.reward === 'none') ok = reward === null;
      if (ok && f.min !== '') ok = reward !== null && reward >= Number(f.min);
      if (ok && f.max !== '') ok = reward !== null && reward <= Number(f.max);
      if (ok && f.error === '__none') ok = error === '';
      else if (ok && f.error === '__any') ok = error !== '';
      else if (ok && f.error) ok = error === f.error;
      if (ok && f.stop) ok = stopsOf(row).indexOf(f.stop) >= 0;
      if (ok && f.component) {
        var v = componentOf(row, f.component);
        ok = f.outcome === 'none' ? v === null : v !== null && (f.outcome === 'pass' ? v >= t : v < t);
      }
      if (ok && text) ok = textOf(row).indexOf(text) >= 0;
      return ok;
    }).sort(compare);
  }
  function query(f, offset, limit){
    var q = new URLSearchParams();
    Object.keys(f).forEach(function(k){ if (f[k] !== '') q.set(k, f[k]); });
    q.set('sort', sort.key);
    if (sort.desc) q.set('desc', '1');
    q.set('offset', String(offset));
    q.set('limit', String(limit));
    return q.toString();
  }
  function options(id, values, fixed){
    var select = document.getElementById(id), keep = select.value;
    var have = Array.prototype.slice.call(select.options, fixed).map(function(o){ return o.value; });
    if (JSON.stringify(have) === JSON.stringify(values)) return;
    while (select.options.length > fixed) select.remove(fixed);
    values.forEach(function(v){
      var o = document.createElement('option'); o.value = v; o.textContent = v; select.appendChild(o);
    });
    select.value = keep;
  }
  function load(){
    var f = filters();
    if (!live) {
      shown = filterHere(f);
      var pages = Math.max(1, Math.ceil(shown.length / PAGE));
      page = Math.min(page, pages - 1);
      draw(shown.slice(page * PAGE, (page + 1) * PAGE));
      return Promise.resolve();
    }
    var mine = ++asked;
    return fetch(live.rows + '&' + query(f, page * PAGE, PAGE)).then(function(r){
      if (!r.ok) return r.json().then(function(e){ throw new Error(e.error || r.statusText); });
      return r.json();
    }).then(function(got){
      if (mine !== asked) return;
      stops = got.stops;
      total = got.total;
      shown = {length: got.matched};
      sofar = got.complete === false ? ' (so far: the run is still being read)' : '';
      var pages = Math.max(1, Math.ceil(got.matched / PAGE));
      if (page > pages - 1) { page = pages - 1; load(); return; }
      options('f-error', got.errors, 3);
      options('f-stop', got.stops.slice().sort(), 1);
      if (JSON.stringify(got.components) !== JSON.stringify(table.components)) {
        table.components = got.components;
        drawHead();
      }
      options('f-component', got.components, 1);
      draw(got.rows);
    }).catch(function(e){
      if (mine !== asked) return;
      document.getElementById('shown').textContent = 'could not read the episodes: ' + e.message;
    });
  }

  function mark(episode){
    Array.prototype.forEach.call(body.querySelectorAll('tr.ep-row'), function(x){
      x.classList.toggle('open', x.dataset.episode === episode);
    });
  }
  function show(section, episodeId){
    document.querySelectorAll('section.episode').forEach(function(x){ x.hidden = true; });
    section.hidden = false;
    history.replaceState(null, '', '#episode=' + encodeURIComponent(episodeId));
    mark(episodeId);
    var first = highlightSection(section) && section.querySelector('mark.hit');
    (first || section).scrollIntoView(first ? {block: 'center'} : undefined);
  }
  function fetchSection(param){
    // The section as the server renders it (the report's own template, escaped there).
    return fetch(live.episode + '&' + param).then(function(r){
      if (!r.ok) return r.json().then(function(e){ throw new Error(e.error || r.statusText); });
      return r.text();
    }).then(function(html){
      var box = document.createElement('div');
      box.innerHTML = html;
      var section = box.querySelector('section.episode');
      var old = section && document.getElementById(section.id);
      if (old) old.remove();
      document.getElementById('details').appendChild(section);
      return section;
    });
  }
  function open(row){
    if (live) {
      fetchSection('i=' + row[col.index]).then(function(section){
        show(section, row[col.episode_id]);
      }).catch(function(e){ document.getElementById('shown').textContent = e.message; });
      return;
    }
    var section = document.getElementById('ep-' + row[col.index]);
    if (!section) {
      section = document.getElementById('ep-missing');
      document.getElementById('ep-missing-title').textContent = 'Episode ' +
        row[col.episode_id] + ': task ' + row[col.task] + ', rollout ' + row[col.rollout];
    }
    show(section, row[col.episode_id]);
  }

  var typing = null;
  ['f-task','f-rollout','f-reward','f-min','f-max','f-error','f-stop','f-component','f-outcome','f-text'].forEach(function(id){
    var again = function(){
      clearTimeout(typing);
      if (id !== 'f-text') { page = 0; load(); return; }
      // A search waits for the typing to pause: a live one reads the run's messages.
      typing = setTimeout(function(){
        page = 0;
        load();
        var open_ = document.querySelector('section.episode:not([hidden])');
        if (open_) highlightSection(open_);
      }, 250);
    };
    document.getElementById(id).addEventListener('input', again);
    document.getElementById(id).addEventListener('change', again);
  });
  document.getElementById('prev').addEventListener('click', function(){ page = Math.max(0, page - 1); load(); });
  document.getElementById('next').addEventListener('click', function(){ page++; load(); });

  // Downloads: made here from the page's data (the live page asks the server for every row),
  // so they need no network beyond the page's own.
  function csvField(x){
    var text = x === null || x === undefined ? '' : String(x);
    return /[",\n\r]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
  }
  function csv(rows){
    return rows.map(function(r){ return r.map(csvField).join(','); }).join('\r\n') + '\r\n';
  }
  function flat(obj, prefix, out){
    Object.keys(obj).forEach(function(k){
      var v = obj[k], key = prefix ? prefix + '.' + k : k;
      if (v && typeof v === 'object' && !Array.isArray(v)) flat(v, key, out);
      else out.push([key, Array.isArray(v) ? JSON.stringify(v) : v]);
    });
    return out;
  }
  function episodeObjects(rows){
    return rows.map(function(row){
      var o = {};
      table.columns.forEach(function(name, i){ o[name] = row[i]; });
      o.stops = stopsOf(row);
      var seats = {};
      table.seats.forEach(function(s, i){ seats[s] = row[col.seat_rewards][i]; });
      o.seat_rewards = seats;
      return o;
    });
  }
  function episodeTable(rows){
    var head = ['index', 'episode_id', 'task', 'rollout', 'reward'];
    table.seats.forEach(function(s){ head.push('reward ' + s); });
    table.components.forEach(function(c){ head.push('component ' + c); });
    head = head.concat(['error_type', 'error', 'stops', 'turns', 'calls', 'wall_s', 'prompt']);
    return [head].concat(rows.map(function(row){
      var out = [row[col.index], row[col.episode_id], row[col.task], row[col.rollout],
                 row[col.reward]];
      out = out.concat(table.seats.length ? row[col.seat_rewards] : []);
      out = out.concat(table.components.map(function(c){ return componentOf(row, c); }));
      return out.concat([row[col.error_type], row[col.error], stopsOf(row).join('; '),
                         row[col.turns], row[col.calls], row[col.wall_s], row[col.prompt]]);
    }));
  }
  var makers = {
    'summary-json': function(){ return ['summary.json', 'application/json',
                                        JSON.stringify(runData().summary, null, 2)]; },
    'summary-csv': function(){ return ['summary.csv', 'text/csv',
                                       csv([['figure', 'value']].concat(flat(runData().summary, '', [])))]; },
    'episodes-json': function(rows){ return ['episodes.json', 'application/json',
                                             JSON.stringify(episodeObjects(rows), null, 1)]; },
    'episodes-csv': function(rows){ return ['episodes.csv', 'text/csv', csv(episodeTable(rows))]; }
  };
  function everyRow(){
    if (!live) return Promise.resolve(all);
    return fetch(live.rows + '&' + query({}, 0, 'all')).then(function(r){ return r.json(); })
      .then(function(got){ stops = got.stops; return got.rows; });
  }
  function made(which){
    return which.indexOf('episodes') === 0 ? everyRow().then(makers[which]) :
      Promise.resolve(makers[which]());
  }
  // Delegated: the live page puts the summary, and its buttons, in again as the run goes.
  document.addEventListener('click', function(ev){
    var button = ev.target.closest && ev.target.closest('button[data-download]');
    if (!button) return;
    made(button.dataset.download).then(function(m){
      var link = document.createElement('a');
      link.href = URL.createObjectURL(new Blob([m[2]], {type: m[1]}));
      link.download = m[0];
      document.body.appendChild(link);
      link.click();
      setTimeout(function(){ URL.revokeObjectURL(link.href); link.remove(); }, 0);
    });
  });
  window.interplayDownload = function(which){
    return live ? made(which).then(function(m){ return m[2]; }) :
      (which.indexOf('episodes') === 0 ? makers[which](all) : makers[which]())[2];
  };

  function safeDecode(text){
    try { return decodeURIComponent(text); } catch (e) { return null; }  // a hand-made link
  }
  function fromHash(){
    var m = /^#episode=(.+)$/.exec(location.hash);
    if (!m) return;
    var want = safeDecode(m[1]);
    if (want === null) return;
    var open_ = document.querySelector('section.episode:not([hidden])');
    if (open_ && open_.dataset.episode === want) return;
    if (live) {
      fetchSection('id=' + encodeURIComponent(want)).then(function(section){ show(section, want); })
        .catch(function(){});
      return;
    }
    for (var i = 0; i < all.length; i++) {
      if (all[i][col.episode_id] === want) {
        var at = shown.indexOf(all[i]);
        if (at >= 0 && Math.floor(at / PAGE) !== page) {
          page = Math.floor(at / PAGE);
          draw(shown.slice(page * PAGE, (page + 1) * PAGE));
        }
        open(all[i]);
        return;
      }
    }
  }
  // What the live page's script calls as the run's episodes land: the same page again.
  window.interplayTable = {refresh: load};
  load();
  window.addEventListener('hashchange', fromHash);
  // A page restored from the back/forward cache runs no script again: read the hash then too.
  window.addEventListener('pageshow', fromHash);
  fromHash();
})();
