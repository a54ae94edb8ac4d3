// The Cairn dashboard: polls /dashboard/state.json and redraws. Every value from the server
// goes into the page as text (textContent, SVG attributes), never as markup: conversation
// labels and event details come from clients.
'use strict';

const POLL_MS = 1000;
const SVG = 'http://www.w3.org/2000/svg';
const KINDS = [
  ['shared_rows', 'shared rows'],
  ['private_state', 'private state'],
  ['reserved', 'reserved'],
  ['free', 'free'],
];

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; ++i; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(n < 10 ? 2 : 1)) + ' ' + units[i];
}

function num(n) { return Number(n).toLocaleString('en-US'); }
function ms(n) { return Number(n).toFixed(n < 10 ? 1 : 0) + ' ms'; }

function replace(id, ...children) {
  const target = document.getElementById(id);
  target.replaceChildren(...children);
}

function table(headers, rows) {
  const head = el('tr', {}, ...headers.map(h => el('th', { class: h.num ? 'num' : '' }, h.text)));
  const body = rows.map(r => el('tr', {}, ...r.map((c, i) =>
    el('td', { class: headers[i].num ? 'num' : '' }, c))));
  return el('table', {}, el('thead', {}, head), el('tbody', {}, ...body));
}

function drawSlots(state) {
  const parts = [];
  for (const d of state.daemons) {
    const title = el('p', { class: 'muted' }, d.address, ' · ',
      d.ready ? `${d.model} (${d.backend}) · ${d.queued} queued` : 'not ready: ' + d.error);
    parts.push(title);
    if (!d.ready) continue;
    const rows = d.slots.map(s => [
      String(s.slot), el('span', { class: 'badge ' + s.state }, s.state), num(s.tokens),
      s.conversation || '—', s.request_id || '—']);
    const t = table([{ text: 'slot' }, { text: 'state' }, { text: 'tokens', num: true },
      { text: 'conversation' }, { text: 'request' }], rows);
    t.id = 'slots-table';
    parts.push(t);
  }
  replace('slots', ...parts);
}

function budgetBar(b, id) {
  const bar = el('div', { class: 'budget-bar', id });
  const total = Math.max(1, b.capacity);
  for (const [kind, label] of KINDS) {
    const seg = el('div', { class: 'seg ' + kind, title: `${label}: ${bytes(b[kind])}` });
    seg.dataset.kind = kind;
    seg.dataset.bytes = String(b[kind]);
    seg.style.width = (100 * b[kind] / total) + '%';
    bar.append(seg);
  }
  return bar;
}

function drawBudget(state) {
  const c = state.cache;
  if (!c) { replace('budget', el('p', { class: 'muted' }, 'no cache daemon (--cache)')); return; }
  if (!c.up) { replace('budget', el('p', { class: 'error' }, 'cache unreachable: ' + c.error)); return; }
  const parts = [];
  for (const [tier, b] of [['ram', c.ram], ['disk', c.disk]]) {
    if (!b) continue;
    const box = el('div', { class: 'budget-tier', id: 'budget-' + tier });
    box.append(el('strong', {}, tier.toUpperCase() + ' '),
      el('span', { class: 'muted' }, `${bytes(b.capacity)} budget · ${num(b.checkpoints)}` +
        (b.max_checkpoints ? ` of ${num(b.max_checkpoints)}` : '') + ' checkpoints'));
    box.append(budgetBar(b, 'budget-bar-' + tier));
    const full = el('div', { class: 'budget-bar full-copy' });
    const seg = el('div', { class: 'seg full_copy',
      title: `as full copies: ${bytes(b.full_copy)}` });
    seg.style.width = Math.min(100, 100 * b.full_copy / Math.max(1, b.capacity)) + '%';
    full.append(seg);
    box.append(full);
    const legend = el('div', { class: 'legend' });
    for (const [kind, label] of KINDS) {
      legend.append(el('span', {}, el('span', { class: 'swatch seg ' + kind }),
        `${label} ${bytes(b[kind])}`));
    }
    legend.append(el('span', {}, el('span', { class: 'swatch seg full_copy' }),
      `as full copies ${bytes(b.full_copy)}`));
    box.append(legend);
    parts.push(box);
  }
  const hits = c.hits;
  parts.push(el('p', { class: 'muted' },
    `${num(c.lookups)} lookups · hits live ${num(hits.live)}, RAM ${num(hits.ram)}, ` +
    `disk ${num(hits.disk)} · ${num(c.tokens_restored)} tokens restored · ` +
    `evictions: ` + (c.evictions.length === 0 ? 'none' :
      c.evictions.map(e => `${e.tier} ${e.reason} ${num(e.count)}`).join(', '))));
  replace('budget', ...parts);
}

const TIER_RANK = { live: 3, ram: 2, disk: 1 };

function drawTree(state) {
  const c = state.cache;
  if (!c || !c.up) { replace('tree', el('p', { class: 'muted' }, 'no cache data')); return; }
  const nodes = c.tree.nodes;
  if (nodes.length === 0) {
    replace('tree', el('p', { class: 'muted', id: 'tree-empty' }, 'no checkpoints yet'));
    return;
  }
  const children = new Map([[0, []]]);
  for (const n of nodes) { children.set(n.id, []); }
  for (const n of nodes) { (children.get(n.parent) || children.get(0)).push(n); }
  // Leaves get consecutive rows; a parent sits at its first child's row.
  const row = new Map();
  let next = 0;
  const place = id => {
    const kids = children.get(id) || [];
    if (kids.length === 0) { row.set(id, next++); return; }
    kids.sort((a, b) => a.depth - b.depth);
    kids.forEach(k => place(k.id));
    row.set(id, row.get(kids[0].id));
  };
  place(0);
  const maxDepth = Math.max(1, ...nodes.map(n => n.depth));
  const rowH = 26, left = 24, right = 150, width = 900;
  const height = Math.max(1, next) * rowH + 16;
  const x = d => left + (width - left - right) * d / maxDepth;
  const y = id => 12 + row.get(id) * rowH;
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': 'checkpoint tree', id: 'tree-svg' });
  const depthOf = new Map([[0, 0]]);
  for (const n of nodes) depthOf.set(n.id, n.depth);
  for (const n of nodes) {
    const p = depthOf.has(n.parent) ? n.parent : 0;
    root.append(svg('path', { class: 'tree-edge',
      d: `M${x(depthOf.get(p))},${y(p)} V${y(n.id)} H${x(n.depth)}` }));
  }
  root.append(svg('circle', { cx: x(0), cy: y(0), r: 4, class: 'tier-none' }));
  for (const n of nodes) {
    let best = 'none';
    for (const cand of n.candidates) {
      if ((TIER_RANK[cand.tier] || 0) > (TIER_RANK[best] || 0)) best = cand.tier;
    }
    const g = svg('g', { class: 'tree-node', 'data-tier': best, 'data-depth': n.depth });
    g.append(svg('circle', { cx: x(n.depth), cy: y(n.id), r: n.candidates.length ? 7 : 4,
      class: 'tier-' + best }));
    const label = svg('text', { x: x(n.depth) + 10, y: y(n.id) + 4 });
    const tiers = [...new Set(n.candidates.map(cand => cand.tier))].join('+');
    label.textContent = num(n.depth) + (tiers ? ' · ' + tiers : '');
    g.append(label);
    const title = svg('title', {});
    title.textContent = `depth ${num(n.depth)}, edge ${num(n.edge_tokens)} tokens` +
      n.candidates.map(cand => `\n${cand.tier}` +
        (cand.tier === 'live' ? ` slot ${cand.slot}` : ` checkpoint ${cand.checkpoint}`)).join('');
    g.append(title);
    root.append(g);
  }
  const legend = el('div', { class: 'legend' });
  for (const t of ['live', 'ram', 'disk']) {
    const s = el('span', { class: 'swatch' });
    s.classList.add('seg');
    s.style.background = `var(--${t})`;
    legend.append(el('span', {}, s, t));
  }
  if (c.tree.truncated) legend.append(el('span', { class: 'muted' }, '(truncated)'));
  replace('tree', root, legend);
}

function drawTtft(state) {
  const rows = state.ttft_by_tier;
  if (rows.length === 0) { replace('ttft', el('p', { class: 'muted' }, 'no requests yet')); return; }
  const max = Math.max(1, ...rows.map(r => r.p90_ms));
  const t = table([{ text: 'tier' }, { text: 'requests', num: true }, { text: 'mean', num: true },
    { text: 'p50', num: true }, { text: 'p90', num: true }, { text: '' }],
    rows.map(r => {
      const bar = el('div', { class: 'ttft-bar ' + r.tier });
      bar.style.width = Math.max(2, 160 * r.mean_ms / max) + 'px';
      return [r.tier, num(r.count), ms(r.mean_ms), '≤ ' + ms(r.p50_ms), '≤ ' + ms(r.p90_ms), bar];
    }));
  t.id = 'ttft-table';
  replace('ttft', t);
}

function drawEvents(state) {
  const c = state.cache;
  if (!c || !c.up || c.events.length === 0) {
    replace('events', el('p', { class: 'muted' }, 'no events'));
    return;
  }
  const t = table([{ text: 'time' }, { text: 'event' }, { text: 'tier' }, { text: 'depth', num: true },
    { text: 'bytes', num: true }, { text: 'reason' }, { text: 'conversation' }],
    c.events.slice(0, 25).map(e => [new Date(e.unix_ms).toLocaleTimeString(), e.kind,
      e.tier === 'unspecified' ? '' : e.tier, num(e.depth), e.bytes ? bytes(e.bytes) : '',
      e.reason, e.conversation]));
  t.id = 'events-table';
  replace('events', t);
}

function drawStatus(state) {
  const ready = state.daemons.filter(d => d.ready).length;
  const cache = state.cache ? (state.cache.up ? 'cache up' : 'cache down') : 'no cache';
  const g = state.gateway;
  document.getElementById('status').className = 'muted';
  replace('status', `${ready}/${state.daemons.length} inference daemons ready · ${cache} · ` +
    `${g.inflight} requests in progress · updated ` + new Date(state.unix_ms).toLocaleTimeString());
  document.body.dataset.loaded = 'true';
}

async function poll() {
  try {
    const r = await fetch('/dashboard/state.json', { cache: 'no-store', credentials: 'same-origin' });
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    const state = await r.json();
    for (const draw of [drawSlots, drawBudget, drawTree, drawTtft, drawEvents, drawStatus]) {
      try { draw(state); } catch (e) { console.error(draw.name, e); }
    }
  } catch (e) {
    const s = document.getElementById('status');
    s.className = 'error';
    s.textContent = 'cannot read the state: ' + e.message;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
