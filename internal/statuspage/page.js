
(function () {
  'use strict';
  // The JSON document and the event stream sit beside the page, whether
  // it was opened as .../status/ or .../status.
  var base = location.pathname.slice(-1) === '/' ? location.pathname : location.pathname + '/';
  var main = document.getElementById('pipelines');
  var conn = document.getElementById('conn');
  var updated = document.getElementById('updated');
  document.getElementById('json').href = base + 'status.json';
  var updates = 0;
  var colors = ['#2e6fdb', '#e8590c', '#12805c', '#9c36b5', '#c0362c', '#0c8599', '#846358', '#5c940d',
    '#d6336c', '#1971c2', '#f08c00', '#495057', '#7048e8', '#087f5b', '#a61e4d', '#364fc7'];

  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === 'text') e.textContent = attrs[k];
        else if (k === 'cls') e.className = attrs[k];
        else e.setAttribute(k, attrs[k]);
      });
    }
    (kids || []).forEach(function (c) { if (c != null) e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c); });
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === 'text') e.textContent = attrs[k]; else e.setAttribute(k, attrs[k]);
    });
    return e;
  }
  function int(n) { return (n || 0).toLocaleString('en-US'); }
  function dur(s) {
    if (s == null) return '–';
    if (s < 1) return Math.round(s * 1000) + ' ms';
    if (s < 60) return s.toFixed(1) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
    return (s / 3600).toFixed(1) + ' h';
  }
  // short is dur for an axis label.
  function short(s) {
    if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + 's';
    if (s < 3600) return Math.round(s / 60) + 'm';
    return (s / 3600).toFixed(1) + 'h';
  }
  function clock(t) { return t ? new Date(t).toISOString().slice(11, 19) : '–'; }
  function stamp(t) { return t ? new Date(t).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–'; }
  function fact(label, value, field) {
    return el('div', null, [el('dt', { text: label }), el('dd', { text: value, 'data-field': field })]);
  }
  function bar(done, est) {
    if (!est) return el('span', { text: int(done) + ' rows' });
    var pct = Math.min(100, 100 * done / est);
    var b = el('span', { cls: 'progress', title: pct.toFixed(1) + '%' }, [el('span')]);
    b.firstChild.style.width = pct.toFixed(1) + '%';
    return el('span', null, [b, int(done) + ' of ~' + int(est) + ' (' + pct.toFixed(0) + '%)']);
  }

  function streams(p) {
    if (!p.streams.length) return el('p', { cls: 'none', text: 'No stream read yet in this attempt.' });
    var rows = p.streams.map(function (s) {
      var snap = s.snapshot ? bar(s.snapshot.done, s.snapshot.estimated) : el('span', { cls: 'none', text: '–' });
      return el('tr', { 'data-stream': s.name }, [
        el('td', { text: s.name }),
        el('td', { cls: 'n', 'data-field': 'read', text: int(s.read) }),
        el('td', { cls: 'n', 'data-field': 'written', text: int(s.totals.written) }),
        el('td', { cls: 'n' + (s.totals.quarantined ? ' q' : ''), 'data-field': 'quarantined', text: int(s.totals.quarantined) }),
        el('td', { cls: 'n', 'data-field': 'held', text: int(s.totals.held) }),
        el('td', { 'data-field': 'snapshot' }, [snap])]);
    });
    return el('table', null, [el('thead', null, [el('tr', null, [el('th', { text: 'stream' }),
      el('th', { cls: 'n', text: 'read (attempt)' }), el('th', { cls: 'n', text: 'written' }),
      el('th', { cls: 'n', text: 'quarantined' }), el('th', { cls: 'n', text: 'held' }),
      el('th', { text: 'snapshot' })])]), el('tbody', null, rows)]);
  }

  function splits(p) {
    if (!p.splits.length) return el('p', { cls: 'none', text: 'No splits open.' });
    var rows = p.splits.map(function (s) {
      var lag = s.lag ? (s.lag.age_seconds != null ? dur(s.lag.age_seconds) : '?') : '–';
      var behind = s.lag ? int(s.lag.behind) + ' ' + s.lag.unit : '–';
      var snap = s.snapshot ? bar(s.snapshot.done, s.snapshot.estimated) : el('span', { cls: 'none', text: '–' });
      var paused = s.paused ? el('span', { cls: 'paused', text: 'paused since ' + clock(s.paused_since) }) : 'reading';
      return el('tr', { 'data-split': s.id }, [el('td', { text: s.id }), el('td', { text: s.streams.join(', ') || '–' }),
        el('td', { cls: 'n', 'data-field': 'lag', text: lag }), el('td', { cls: 'n', 'data-field': 'behind', text: behind }),
        el('td', { 'data-field': 'snapshot' }, [snap]), el('td', { 'data-field': 'paused' }, [paused]),
        el('td', { cls: 'n', 'data-field': 'backpressure', text: dur(s.backpressure_seconds) })]);
    });
    return el('table', null, [el('thead', null, [el('tr', null, ['split', 'streams', 'lag', 'behind', 'snapshot',
      'state', 'backpressure'].map(function (h, i) { return el('th', { cls: i === 2 || i === 3 || i === 6 ? 'n' : '', text: h }); }))]),
      el('tbody', null, rows)]);
  }

  // chart draws each split's lag over the kept samples: its age where the
  // source tells one, else how far behind it is in the source's unit.
  function chart(p, now) {
    var hist = p.lag_history, byAge = false, unit = '', ids = [];
    hist.forEach(function (s) {
      s.splits.forEach(function (l) {
        if (l.age_seconds != null) byAge = true;
        unit = unit || l.unit;
        if (ids.indexOf(l.id) < 0) ids.push(l.id);
      });
    });
    if (!ids.length) return el('p', { cls: 'none', text: 'No split reports a lag.' });
    var W = 600, H = 150, L = 44, R = 8, T = 10, B = 20;
    var t1 = Date.parse(now), t0 = Math.min(Date.parse(hist[0].time), t1 - 60000);
    var vmax = 0;
    hist.forEach(function (s) {
      s.splits.forEach(function (l) { vmax = Math.max(vmax, byAge ? (l.age_seconds || 0) : l.behind); });
    });
    vmax = vmax > 0 ? vmax * 1.1 : 1;
    var x = function (t) { return L + (W - L - R) * (t - t0) / Math.max(1, t1 - t0); };
    var y = function (v) { return T + (H - T - B) * (1 - v / vmax); };
    var g = svg('svg', { 'class': 'chart', viewBox: '0 0 ' + W + ' ' + H, preserveAspectRatio: 'none', role: 'img',
      'aria-label': 'lag per split' });
    g.appendChild(svg('line', { x1: L, y1: y(0), x2: W - R, y2: y(0), stroke: '#d0d5dd' }));
    g.appendChild(svg('line', { x1: L, y1: T, x2: L, y2: y(0), stroke: '#d0d5dd' }));
    g.appendChild(svg('text', { x: L - 4, y: T + 8, 'text-anchor': 'end', text: byAge ? short(vmax) : int(Math.round(vmax)) }));
    g.appendChild(svg('text', { x: L - 4, y: y(0), 'text-anchor': 'end', text: '0' }));
    g.appendChild(svg('text', { x: L, y: H - 5, text: '−' + short((t1 - t0) / 1000) }));
    g.appendChild(svg('text', { x: W - R, y: H - 5, 'text-anchor': 'end', text: 'now' }));
    var legend = el('div', { cls: 'legend' });
    ids.forEach(function (id, i) {
      var pts = [];
      hist.forEach(function (s) {
        s.splits.forEach(function (l) {
          if (l.id !== id) return;
          var v = byAge ? l.age_seconds : l.behind;
          if (v != null) pts.push(x(Date.parse(s.time)).toFixed(1) + ',' + y(v).toFixed(1));
        });
      });
      var c = colors[i % colors.length];
      g.appendChild(svg('polyline', { points: pts.join(' '), fill: 'none', stroke: c, 'stroke-width': 1.6,
        'data-split': id, 'vector-effect': 'non-scaling-stroke' }));
      legend.appendChild(el('span', null, [el('i', { style: 'background:' + c }), id]));
    });
    var what = byAge ? 'age of the oldest unread record' : 'behind the source, in ' + (unit || 'its unit');
    return el('div', { 'data-field': 'lag-chart', 'data-samples': hist.length }, [g, legend,
      el('div', { cls: 'none', text: 'Lag: ' + what + '; one sample a second, the last ' + hist.length + '.' })]);
  }

  function reasons(p) {
    if (!p.quarantine.length) return el('p', { cls: 'none', text: 'Nothing quarantined.' });
    return el('table', null, [el('thead', null, [el('tr', null, [el('th', { text: 'stream' }),
      el('th', { text: 'reason' }), el('th', { cls: 'n', text: 'records' })])]),
    el('tbody', null, p.quarantine.map(function (q) {
      return el('tr', { 'data-reason': q.stream + '/' + q.reason }, [el('td', { text: q.stream }),
        el('td', { text: q.reason }), el('td', { cls: 'n q', 'data-field': 'rows', text: int(q.rows) })]);
    }))]);
  }

  var bad = /fenced|failed|lost/, warn = /lagging|blocked|paused|reset|quarantine|retrying/, ok = /succeeded|recovered|resumed|started/;
  function events(p) {
    if (!p.events.length) return el('p', { cls: 'none', text: 'No events yet.' });
    var items = p.events.slice().reverse().map(function (e) {
      var what = [];
      if (e.stream) what.push(e.stream);
      if (e.split) what.push('split ' + e.split);
      if (e.column) what.push('column ' + e.column);
      if (e.change) what.push(e.change);
      if (e.from || e.to) what.push((e.from || '?') + ' → ' + (e.to || '?'));
      if (e.rows) what.push(int(e.rows) + (e.rows === 1 ? ' record' : ' records'));
      if (e.epoch) what.push('epoch ' + e.epoch);
      if (e.generation) what.push('gen ' + e.generation);
      if (e.lag_seconds) what.push('lag ' + dur(e.lag_seconds));
      if (e.paused_seconds) what.push('paused ' + dur(e.paused_seconds));
      if (e.outcome) what.push(e.outcome);
      if (e.step) what.push('step ' + e.step);
      if (e.took_seconds) what.push('took ' + dur(e.took_seconds));
      if (e.retry) what.push('retry ' + e.retry);
      if (e.wait_seconds) what.push('in ' + dur(e.wait_seconds));
      if (e.cause) what.push('cause ' + e.cause);
      if (e.detail) what.push(e.detail);
      if (e.error) what.push(e.error);
      var cls = 'kind' + (bad.test(e.kind) ? ' bad' : warn.test(e.kind) ? ' warn' : ok.test(e.kind) ? ' ok' : '');
      return el('li', { 'data-kind': e.kind }, [el('time', { text: clock(e.time), title: stamp(e.time) }),
        el('span', { cls: cls, text: e.kind }), el('span', { text: what.join(' · ') })]);
    });
    return el('ol', { cls: 'events' }, items);
  }

  function pipeline(p, i, doc) {
    var backlog = Object.keys(p.backlog).map(function (u) { return int(p.backlog[u]) + ' ' + u; }).join(', ');
    var facts = el('dl', { cls: 'facts' }, [
      fact('generation', String(p.generation), 'generation'),
      fact('last committed epoch', String(p.epoch), 'epoch'),
      fact('committed', p.epoch_age_seconds == null ? 'never' : dur(p.epoch_age_seconds) + ' ago', 'epoch-age'),
      fact('epochs this attempt', int(p.epochs), 'epochs'),
      fact('read this attempt', int(p.read), 'read'),
      fact('kind', p.bounded ? 'Sync' : 'Run', 'kind'),
      fact('started', stamp(p.started), 'started'),
      fact('lag', dur(p.lag_seconds), 'lag'),
      fact('backlog', backlog || '–', 'backlog'),
      fact('paused splits', String(p.paused) + ' of ' + p.splits.length, 'paused'),
      fact('retries in a row', int(p.retries), 'retries'),
      fact('events dropped', int(p.events_dropped), 'events-dropped')]);
    var err = p.last_error ? el('div', { cls: 'error', 'data-field': 'last-error' },
      ['last error, ' + stamp(p.last_error_time) + ': ' + p.last_error]) : null;
    var box = function (title, content) { return el('div', null, [el('h3', { text: title }), el('div', { cls: 'scroll' }, [content])]); };
    return el('section', { cls: 'pipeline', 'data-index': i, 'data-name': p.name, 'data-phase': p.phase }, [
      el('h2', null, [el('span', { text: p.name }), el('span', { cls: 'badge ' + p.phase, 'data-field': 'phase', text: p.phase })]),
      facts, err,
      el('div', { cls: 'cols' }, [box('Streams', streams(p)), box('Quarantine reasons', reasons(p))]),
      box('Splits', splits(p)),
      el('div', { cls: 'cols' }, [box('Lag, last minutes', chart(p, doc.time)), box('Recent events', events(p))])]);
  }

  // hists holds each pipeline's lag samples: the event stream sends them
  // whole first, then only those from the last one sent on (delta).
  var hists = [];
  function merge(doc) {
    doc.pipelines.forEach(function (p, i) {
      var h = p.lag_history;
      if (doc.delta && hists[i]) {
        h = hists[i];
        if (p.lag_history.length) {
          var from = Date.parse(p.lag_history[0].time);
          h = h.filter(function (s) { return Date.parse(s.time) < from; }).concat(p.lag_history);
        }
        h = h.slice(-300); // the server keeps as many (etl.LagSamples)
      }
      hists[i] = p.lag_history = h;
    });
  }

  function render(doc) {
    merge(doc);
    updates++;
    document.body.setAttribute('data-updates', updates);
    document.body.setAttribute('data-time', doc.time);
    var frag = document.createDocumentFragment();
    doc.pipelines.forEach(function (p, i) { frag.appendChild(pipeline(p, i, doc)); });
    if (!doc.pipelines.length) frag.appendChild(el('p', { cls: 'none', text: 'No pipelines are shown here.' }));
    // Keep where a reader scrolled the event lists to.
    var scrolled = [].map.call(main.querySelectorAll('ol.events'), function (l) { return l.scrollTop; });
    main.replaceChildren(frag);
    [].forEach.call(main.querySelectorAll('ol.events'), function (l, i) { l.scrollTop = scrolled[i] || 0; });
    updated.textContent = 'as of ' + stamp(doc.time);
  }

  function poll() {
    fetch(base + 'status.json', { cache: 'no-store' }).then(function (r) { return r.json(); }).then(function (d) {
      conn.textContent = 'polling'; conn.className = 'live'; render(d);
    }, function () { conn.textContent = 'offline'; conn.className = ''; }).then(function () { setTimeout(poll, 2000); });
  }
  if (!window.EventSource) { poll(); return; }
  var es = new EventSource(base + 'events');
  es.onmessage = function (m) { conn.textContent = 'live'; conn.className = 'live'; render(JSON.parse(m.data)); };
  es.onerror = function () { conn.textContent = 'reconnecting'; conn.className = ''; };
})();
