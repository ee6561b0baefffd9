(function () {
  'use strict';
  var KEY = 'pytest-sadl-theme';
  var root = document.documentElement;

  function stored() {
    try { return window.localStorage.getItem(KEY); } catch (e) { return null; }
  }
  function store(value) {
    try { window.localStorage.setItem(KEY, value); } catch (e) { /* storage off: not remembered */ }
  }
  function systemDark() {
    return !!(window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches);
  }
  function currentTheme() {
    var t = root.getAttribute('data-theme');
    if (t === 'dark' || t === 'light') { return t; }
    return systemDark() ? 'dark' : 'light';
  }
  var saved = stored();
  if (saved === 'dark' || saved === 'light') { root.setAttribute('data-theme', saved); }

  function ready(fn) {
    if (document.readyState !== 'loading') { fn(); } else { document.addEventListener('DOMContentLoaded', fn); }
  }

  function setupTheme() {
    var btn = document.getElementById('theme-toggle');
    if (!btn) { return; }
    function label() {
      var dark = currentTheme() === 'dark';
      btn.textContent = dark ? '\u2600 Light' : '\u263E Dark';
      btn.setAttribute('aria-label', 'Switch to the ' + (dark ? 'light' : 'dark') + ' theme');
    }
    btn.hidden = false;
    label();
    btn.addEventListener('click', function () {
      var next = currentTheme() === 'dark' ? 'light' : 'dark';
      root.setAttribute('data-theme', next);
      store(next);
      label();
    });
  }

  function cellValue(td, kind) {
    if (kind === 'text') { return (td.textContent || '').trim().toLowerCase(); }
    var v = td.getAttribute('data-v');
    return (v === null || v === '') ? null : parseFloat(v);
  }

  function setupSort(table) {
    var heads = table.querySelectorAll('thead th');
    var body = table.tBodies[0];
    if (!body) { return; }
    Array.prototype.forEach.call(heads, function (th, col) {
      var btn = th.querySelector('button.sort');
      if (!btn) { return; }
      btn.addEventListener('click', function () {
        var kind = th.getAttribute('data-kind') || 'text';
        var state = th.getAttribute('aria-sort');
        var dir;
        if (state === 'ascending') { dir = -1; } else if (state === 'descending') { dir = 1; } else { dir = kind === 'text' ? 1 : -1; }
        Array.prototype.forEach.call(heads, function (h) { h.setAttribute('aria-sort', 'none'); });
        th.setAttribute('aria-sort', dir === 1 ? 'ascending' : 'descending');
        var rows = Array.prototype.slice.call(body.rows).map(function (tr, i) {
          return { tr: tr, i: i, v: cellValue(tr.cells[col], kind) };
        });
        rows.sort(function (a, b) {
          if (a.v === null && b.v === null) { return a.i - b.i; }
          if (a.v === null) { return 1; }
          if (b.v === null) { return -1; }
          if (a.v < b.v) { return -dir; }
          if (a.v > b.v) { return dir; }
          return a.i - b.i;
        });
        rows.forEach(function (r) { body.appendChild(r.tr); });
      });
    });
  }

  function fmt(value, kind) {
    if (value === null || isNaN(value)) { return '\u2013'; }
    if (kind === 'int') { return Math.round(value).toLocaleString('en-US'); }
    return value.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }

  function setupFilter() {
    var table = document.getElementById('tests-table');
    if (!table) { return; }
    var input = document.getElementById('tests-filter');
    var outcome = document.getElementById('tests-outcome');
    var idle = document.getElementById('tests-idle');
    var count = document.getElementById('tests-count');
    var heads = Array.prototype.slice.call(table.querySelectorAll('thead th'));
    var foot = table.tFoot ? table.tFoot.rows[0] : null;
    var weightCol = -1;
    heads.forEach(function (th, i) { if (th.getAttribute('data-key') === 'inputs') { weightCol = i; } });
    var body = table.tBodies[0];
    var textCols = [];
    heads.forEach(function (th, i) { if (th.getAttribute('data-kind') === 'text') { textCols.push(i); } });

    // What the filter matches: the test id, its group and its outcome, not the numbers.
    function searchText(tr) {
      if (typeof tr.sadlSearch !== 'string') {
        tr.sadlSearch = textCols.map(function (i) { return tr.cells[i] ? tr.cells[i].textContent : ''; })
          .join('\n').toLowerCase();
      }
      return tr.sadlSearch;
    }

    function apply() {
      var terms = (input && input.value ? input.value : '').toLowerCase().split(/\s+/).filter(Boolean);
      var want = outcome ? outcome.value : '';
      var onlyIdle = !!(idle && idle.checked);
      var shown = [];
      Array.prototype.forEach.call(body.rows, function (tr) {
        var text = searchText(tr);
        var ok = terms.every(function (t) { return text.indexOf(t) !== -1; });
        if (ok && want) { ok = tr.getAttribute('data-outcome') === want; }
        if (ok && onlyIdle) { ok = tr.classList.contains('idle'); }
        tr.hidden = !ok;
        if (ok) { shown.push(tr); }
      });
      if (count) { count.textContent = shown.length + ' of ' + body.rows.length + ' tests shown'; }
      if (!foot) { return; }
      heads.forEach(function (th, col) {
        var agg = th.getAttribute('data-agg');
        var kind = th.getAttribute('data-kind');
        var td = foot.cells[col];
        if (!td) { return; }
        if (agg === 'label') { td.textContent = 'Total (' + shown.length + (shown.length === 1 ? ' test)' : ' tests)'); return; }
        if (agg !== 'sum' && agg !== 'max' && agg !== 'wmean') { return; }
        var result = null, num = 0, den = 0;
        shown.forEach(function (tr) {
          var v = cellValue(tr.cells[col], kind);
          if (v === null) { return; }
          if (agg === 'sum') { result = (result || 0) + v; }
          else if (agg === 'max') { result = result === null ? v : Math.max(result, v); }
          else {
            var w = weightCol >= 0 ? cellValue(tr.cells[weightCol], 'int') : 1;
            w = w === null ? 0 : w;
            num += v * w; den += w;
          }
        });
        if (agg === 'sum' && result === null) { result = 0; }
        if (agg === 'wmean') { result = den > 0 ? num / den : null; }
        td.textContent = fmt(result, agg === 'sum' ? 'int' : kind);
        td.setAttribute('data-v', result === null ? '' : String(result));
      });
    }
    [input, outcome, idle].forEach(function (el) {
      if (el) { el.addEventListener('input', apply); el.addEventListener('change', apply); }
    });
    var controls = document.getElementById('tests-controls');
    if (controls) { controls.hidden = false; }
    apply();
  }

  // A table of a hundred layers or more: the least covered few (in the current sort
  // order), every layer on request, or those whose name has every search term.
  function setupLayers() {
    var table = document.getElementById('layers-table');
    if (!table || !table.getAttribute('data-shown')) { return; }
    var limit = parseInt(table.getAttribute('data-shown'), 10);
    var input = document.getElementById('layers-filter');
    var all = document.getElementById('layers-all');
    var count = document.getElementById('layers-count');
    var body = table.tBodies[0];
    var expanded = false;
    var label = all ? all.textContent : '';

    function apply() {
      var terms = (input && input.value ? input.value : '').toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0;
      Array.prototype.forEach.call(body.rows, function (tr, i) {
        var name = tr.cells[0] ? tr.cells[0].textContent.toLowerCase() : '';
        var ok = terms.length ? terms.every(function (t) { return name.indexOf(t) !== -1; }) : (expanded || i < limit);
        tr.hidden = !ok;
        if (ok) { shown += 1; }
      });
      if (count) { count.textContent = shown + ' of ' + body.rows.length + ' layers shown'; }
      if (all) {
        all.textContent = expanded ? 'Show the ' + limit + ' least covered' : label;
        all.setAttribute('aria-expanded', expanded ? 'true' : 'false');
      }
    }
    if (input) { input.addEventListener('input', apply); }
    if (all) { all.addEventListener('click', function () { expanded = !expanded; apply(); }); }
    // after a sort (its handler runs first, on the header button), collapse to the new first rows
    if (table.tHead) { table.tHead.addEventListener('click', apply); }
    var controls = document.getElementById('layers-controls');
    if (controls) { controls.hidden = false; }
    apply();
  }

  ready(function () {
    setupTheme();
    Array.prototype.forEach.call(document.querySelectorAll('table.sortable'), setupSort);
    setupFilter();
    setupLayers();
  });
}());
