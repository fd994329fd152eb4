(function(){
  var data = JSON.parse(document.getElementById('run-data').textContent);
  var table = JSON.parse(document.getElementById('table-data').textContent);
  var threshold = Number(data.summary.pass_threshold);
  if (!isFinite(threshold)) threshold = 1;
  var PAGE = 200;
  var col = {};
  table.columns.forEach(function(name, i){ col[name] = i; });
  var all = table.rows, shown = all, page = 0;
  var body = document.getElementById('episodes-body');

  function fmt(x){
    if (x === null || x === undefined) return '-';
    if (typeof x === 'number') return String(Number(x.toPrecision(4)));
    return String(x);
  }
  function stopsOf(row){ return row[col.stops].map(function(i){ return table.stops[i]; }); }
  function cell(tr, text, cls){
    var td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  var heads = ['task', 'rollout'];
  if (table.seats.length) table.seats.forEach(function(s){ heads.push('reward ' + s); });
  else heads.push('reward');
  heads = heads.concat(['error', 'stop conditions', 'turns', 'calls', 'wall s', 'prompt']);
  var headRow = document.getElementById('episodes-head');
  heads.forEach(function(h){
    var th = document.createElement('th'); th.textContent = h; headRow.appendChild(th);
  });

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

  function draw(){
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    page = Math.min(page, pages - 1);
    var frag = document.createDocumentFragment();
    shown.slice(page * PAGE, (page + 1) * PAGE).forEach(function(row){
      frag.appendChild(rowElement(row));
    });
    body.textContent = '';
    body.appendChild(frag);
    document.getElementById('shown').textContent = shown.length + ' of ' + all.length + ' shown';
    document.getElementById('page-of').textContent = 'page ' + (page + 1) + ' of ' + pages;
    document.getElementById('pager').hidden = pages < 2;
    var current = location.hash.match(/^#episode=(.+)$/);
    if (current) mark(safeDecode(current[1]));
  }

  function val(id){ return document.getElementById(id).value; }
  function apply(){
    var r = val('f-reward'), lo = val('f-min'), hi = val('f-max');
    var e = val('f-error'), s = val('f-stop');
    shown = all.filter(function(row){
      var reward = row[col.reward], ok = true, error = row[col.error_type];
      if (r === 'pass') ok = reward !== null && reward >= threshold;
      if (r === 'fail') ok = reward !== null && reward < threshold;
      if (r === 'none') ok = reward === null;
      if (ok && lo !== '') ok = reward !== null && reward >= Number(lo);
      if (ok && hi !== '') ok = reward !== null && reward <= Number(hi);
      if (ok && e === '__none') ok = error === '';
      else if (ok && e === '__any') ok = error !== '';
      else if (ok && e) ok = error === e;
      if (ok && s) ok = stopsOf(row).indexOf(s) >= 0;
      return ok;
    });
    page = 0;
    draw();
  }

  function mark(episode){
    Array.prototype.forEach.call(body.querySelectorAll('tr.ep-row'), function(x){
      x.classList.toggle('open', x.dataset.episode === episode);
    });
  }
  function open(row){
    document.querySelectorAll('section.episode').forEach(function(x){ x.hidden = true; });
    var section = document.getElementById('ep-' + row[col.index]);
    if (!section) {
      section = document.getElementById('ep-missing');
      document.getElementById('ep-missing-title').textContent = 'Episode ' +
        row[col.episode_id] + ': task ' + row[col.task] + ', rollout ' + row[col.rollout];
    }
    section.hidden = false;
    history.replaceState(null, '', '#episode=' + encodeURIComponent(row[col.episode_id]));
    mark(row[col.episode_id]);
    section.scrollIntoView();
  }

  ['f-reward','f-min','f-max','f-error','f-stop'].forEach(function(id){
    document.getElementById(id).addEventListener('input', apply);
    document.getElementById(id).addEventListener('change', apply);
  });
  document.getElementById('prev').addEventListener('click', function(){ page--; draw(); });
  document.getElementById('next').addEventListener('click', function(){ page++; draw(); });

  // Downloads: made here from the page's own data, so they need no network either.
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
  function episodeObjects(){
    return all.map(function(row){
      var o = {};
      table.columns.forEach(function(name, i){ o[name] = row[i]; });
      o.stops = stopsOf(row);
      var seats = {};
      table.seats.forEach(function(s, i){ seats[s] = row[col.seat_rewards][i]; });
      o.seat_rewards = seats;
      return o;
    });
  }
  function episodeTable(){
    var head = ['index', 'episode_id', 'task', 'rollout', 'reward'];
    table.seats.forEach(function(s){ head.push('reward ' + s); });
    head = head.concat(['error_type', 'error', 'stops', 'turns', 'calls', 'wall_s', 'prompt']);
    return [head].concat(all.map(function(row){
      var out = [row[col.index], row[col.episode_id], row[col.task], row[col.rollout],
                 row[col.reward]];
      out = out.concat(table.seats.length ? row[col.seat_rewards] : []);
      return out.concat([row[col.error_type], row[col.error], stopsOf(row).join('; '),
                         row[col.turns], row[col.calls], row[col.wall_s], row[col.prompt]]);
    }));
  }
  var makers = {
    'summary-json': function(){ return ['summary.json', 'application/json',
                                        JSON.stringify(data.summary, null, 2)]; },
    'summary-csv': function(){ return ['summary.csv', 'text/csv',
                                       csv([['figure', 'value']].concat(flat(data.summary, '', [])))]; },
    'episodes-json': function(){ return ['episodes.json', 'application/json',
                                         JSON.stringify(episodeObjects(), null, 1)]; },
    'episodes-csv': function(){ return ['episodes.csv', 'text/csv', csv(episodeTable())]; }
  };
  document.querySelectorAll('button[data-download]').forEach(function(button){
    button.addEventListener('click', function(){
      var made = makers[button.dataset.download]();
      var link = document.createElement('a');
      link.href = URL.createObjectURL(new Blob([made[2]], {type: made[1]}));
      link.download = made[0];
      document.body.appendChild(link);
      link.click();
      setTimeout(function(){ URL.revokeObjectURL(link.href); link.remove(); }, 0);
    });
  });
  window.interplayDownload = function(which){ return makers[which]()[2]; };

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
    for (var i = 0; i < all.length; i++) {
      if (all[i][col.episode_id] === want) {
        var at = shown.indexOf(all[i]);
        if (at >= 0 && Math.floor(at / PAGE) !== page) { page = Math.floor(at / PAGE); draw(); }
        open(all[i]);
        return;
      }
    }
  }
  apply();
  window.addEventListener('hashchange', fromHash);
  // A page restored from the back/forward cache runs no script again: read the hash then too.
  window.addEventListener('pageshow', fromHash);
  fromHash();
})();
