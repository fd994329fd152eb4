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
      if (r === 'fail') ok = reward !== null && reward < threshold;
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
    history.replaceState(null, '', '#episode=' + encodeURIComponent(row.dataset.episode));
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
    var want;
    try { want = decodeURIComponent(m[1]); } catch (e) { return; }  // a hand-made, broken link
    rows.forEach(function(row){
      if (row.dataset.episode === want && !row.classList.contains('open')) open(row);
    });
  }
  window.addEventListener('hashchange', fromHash);
  // A page restored from the back/forward cache runs no script again: read the hash then too.
  window.addEventListener('pageshow', fromHash);
  fromHash();
})();
