/**
 * The status page: one HTML document with its style and script inline (allowed by a per-response CSP
 * nonce), no framework and no external resource. The script reads the JSON API next to it and builds
 * every element with `textContent`, so whatever a message holds is shown as text, never as markup.
 */
export function renderPage(options: { nonce: string; tokenRequired: boolean }): string {
  const { nonce } = options;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>duetime</title>
<style nonce="${nonce}">${STYLE}</style>
</head>
<body>
<header>
  <h1>duetime</h1>
  <span id="label" data-testid="label"></span>
  <span id="mode" class="badge" data-testid="mode"></span>
  <span class="grow"></span>
  <span id="now" class="muted"></span>
  <button id="refresh" type="button">Refresh</button>
</header>
<main>
  <form id="login" hidden>
    <p>This dashboard needs its token.</p>
    <input id="token" type="password" autocomplete="off" placeholder="token" aria-label="token">
    <button type="submit">Open</button>
  </form>
  <p id="error" class="error" role="alert" hidden data-testid="error"></p>
  <section class="cards">
    <div class="card"><div class="n" id="pending" data-testid="pending">–</div><div>pending</div></div>
    <div class="card"><div class="n" id="due" data-testid="due">–</div><div>due now</div></div>
    <div class="card"><div class="n" id="dead" data-testid="dead">–</div><div>dead letters</div></div>
    <div class="card"><div class="n" id="oldest" data-testid="oldest">–</div><div>oldest due waits</div></div>
  </section>
  <section>
    <h2>Lateness <span class="muted" id="lateness-note"></span></h2>
    <div id="chart" data-testid="chart"></div>
  </section>
  <section>
    <h2>Schedules</h2>
    <form id="search" class="row">
      <input id="prefix" placeholder="key prefix, e.g. order/" aria-label="key prefix" data-testid="prefix">
      <label><input id="due-only" type="checkbox"> deadline passed only</label>
      <button type="submit">Search</button>
    </form>
    <table data-testid="schedules"><thead><tr><th>key</th><th>type</th><th>deadline</th><th>due</th><th>attempts</th><th>last error</th><th>data</th><th></th></tr></thead><tbody id="schedules"></tbody></table>
    <div class="row"><button id="prev" type="button" data-testid="prev">← Previous</button><span id="page" data-testid="page"></span><button id="next" type="button" data-testid="next">Next →</button></div>
  </section>
  <section>
    <h2>Dead letters</h2>
    <table data-testid="dead-letters"><thead><tr><th>key</th><th>type</th><th>error</th><th>attempts</th><th>dead since</th><th>data</th><th></th></tr></thead><tbody id="dead-letters"></tbody></table>
    <div class="row"><button id="dead-more" type="button" hidden>More</button></div>
  </section>
  <section>
    <h2>Recurring schedules</h2>
    <table data-testid="recurring"><thead><tr><th>key</th><th>type</th><th>spec</th><th>runs</th><th>next occurrences</th></tr></thead><tbody id="recurring"></tbody></table>
    <p class="muted" id="recurring-note"></p>
  </section>
  <section>
    <h2>Calendar groups</h2>
    <div id="groups" data-testid="groups"></div>
  </section>
</main>
<dialog id="confirm" data-testid="confirm">
  <form method="dialog">
    <p id="confirm-text"></p>
    <div class="row"><button value="cancel" data-testid="confirm-cancel">Cancel</button><button value="ok" class="danger" data-testid="confirm-ok">Confirm</button></div>
  </form>
</dialog>
<script nonce="${nonce}">
const TOKEN_REQUIRED = ${options.tokenRequired ? 'true' : 'false'};
${SCRIPT}
</script>
</body>
</html>
`;
}

const STYLE = `
:root { font: 14px/1.4 system-ui, sans-serif; color: #1d2430; background: #f5f6f8; }
header { display: flex; gap: 12px; align-items: center; padding: 10px 20px; background: #1d2430; color: #fff; }
header h1 { font-size: 18px; margin: 0; }
.grow { flex: 1; }
.badge { padding: 2px 8px; border-radius: 10px; background: #3b4656; font-size: 12px; }
.badge.write { background: #a33; }
main { padding: 12px 20px; max-width: 1300px; }
section { background: #fff; border-radius: 6px; padding: 10px 14px; margin: 12px 0; box-shadow: 0 1px 2px #0001; }
h2 { font-size: 15px; margin: 4px 0 8px; }
.cards { display: flex; gap: 12px; background: none; box-shadow: none; padding: 0; }
.card { flex: 1; background: #fff; border-radius: 6px; padding: 10px 14px; box-shadow: 0 1px 2px #0001; }
.card .n { font-size: 24px; font-weight: 600; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 6px; border-bottom: 1px solid #e3e6ea; vertical-align: top; }
th { color: #5b6574; font-weight: 500; }
td.key { font-family: ui-monospace, monospace; word-break: break-all; min-width: 11em; }
td.when { white-space: nowrap; }
pre { margin: 0; max-height: 6em; overflow: auto; font-size: 12px; white-space: pre-wrap; word-break: break-all; }
.row { display: flex; gap: 8px; align-items: center; margin: 8px 0; }
.muted { color: #7a8494; font-size: 12px; }
.error { color: #a33; }
button { font: inherit; padding: 3px 10px; border: 1px solid #b9c0ca; border-radius: 4px; background: #fff; cursor: pointer; }
button:disabled { opacity: .4; cursor: default; }
button.danger { border-color: #a33; color: #a33; }
input { font: inherit; padding: 3px 6px; border: 1px solid #b9c0ca; border-radius: 4px; }
#prefix { width: 260px; }
.group { border-top: 1px solid #e3e6ea; padding: 6px 0; }
.group:first-child { border-top: 0; }
svg text { font-size: 10px; fill: #7a8494; }
`;

const SCRIPT = String.raw`
'use strict';
const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem('duetime-token') || '';
if (location.hash.startsWith('#token=')) {
  token = decodeURIComponent(location.hash.slice(7));
  sessionStorage.setItem('duetime-token', token);
  history.replaceState(null, '', location.pathname + location.search);
}
let csrf = '';
let actions = false;
const state = { cursors: [undefined], index: 0, prefix: '', due: false, deadAfter: undefined };

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function cell(row, text, cls) { const td = el('td', text, cls); row.appendChild(td); return td; }
function dataCell(row, data) { const td = el('td'); if (data !== undefined) td.appendChild(el('pre', data)); row.appendChild(td); }
function when(iso) { return iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : ''; }
function ms(n) { return n < 1000 ? n + ' ms' : n < 120000 ? (n / 1000).toFixed(1) + ' s' : (n / 60000).toFixed(1) + ' min'; }
function count(c) { return c.count + (c.more ? '+' : ''); }

async function api(path, body) {
  const headers = {};
  if (token) headers.authorization = 'Bearer ' + token;
  const init = { headers, credentials: 'same-origin' };
  if (body !== undefined) {
    init.method = 'POST';
    headers['content-type'] = 'application/json';
    headers['x-duetime-csrf'] = csrf;
    init.body = JSON.stringify(body);
  }
  const res = await fetch('api/' + path, init);
  const json = await res.json().catch(() => ({ error: 'unreadable answer (' + res.status + ')' }));
  if (res.status === 401) { $('login').hidden = false; throw new Error(json.error || 'token required'); }
  if (!res.ok) throw new Error(json.error || ('HTTP ' + res.status));
  return json;
}

function showError(error) { $('error').hidden = false; $('error').textContent = String(error.message || error); }

function confirmAction(text) {
  return new Promise((resolve) => {
    const dialog = $('confirm');
    $('confirm-text').textContent = text;
    dialog.returnValue = '';
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.showModal();
  });
}

async function act(action, key, question) {
  if (!(await confirmAction(question))) return;
  try {
    await api('actions/' + action, { key });
    await refresh();
  } catch (error) { showError(error); }
}

function actionButton(label, action, key, question) {
  const b = el('button', label, 'danger');
  b.type = 'button';
  b.dataset.action = action;
  b.dataset.key = key;
  b.addEventListener('click', () => act(action, key, question));
  return b;
}

async function loadOverview() {
  const o = await api('overview');
  csrf = o.csrf;
  actions = o.actions;
  $('label').textContent = o.label;
  $('mode').textContent = o.actions ? 'actions enabled' : 'read-only';
  $('mode').className = o.actions ? 'badge write' : 'badge';
  $('now').textContent = when(o.now);
  $('pending').textContent = count(o.pending);
  $('due').textContent = count(o.due);
  $('dead').textContent = count(o.deadLetters);
  $('oldest').textContent = o.oldestDue ? ms(Date.parse(o.now) - Date.parse(o.oldestDue)) : '–';
}

async function loadSchedules() {
  const q = new URLSearchParams({ limit: '25' });
  if (state.prefix) q.set('prefix', state.prefix);
  if (state.due) q.set('due', '1');
  const after = state.cursors[state.index];
  if (after) q.set('after', after);
  const page = await api('schedules?' + q);
  const body = $('schedules');
  body.replaceChildren();
  for (const s of page.items) {
    const row = el('tr');
    row.dataset.key = s.key;
    cell(row, s.key, 'key');
    cell(row, s.type);
    cell(row, when(s.at), 'when');
    cell(row, s.dueAt !== s.at ? when(s.dueAt) : '', 'when');
    cell(row, s.attempts || '');
    cell(row, s.lastError || '', 'error');
    dataCell(row, s.data);
    const last = cell(row, '');
    if (actions) last.appendChild(actionButton('Cancel', 'cancel', s.key, 'Cancel the schedule ' + s.key + '? It will not be delivered.'));
    body.appendChild(row);
  }
  if (page.items.length === 0) { const row = el('tr'); const td = cell(row, 'no pending schedules', 'muted'); td.colSpan = 8; body.appendChild(row); }
  state.cursors.length = state.index + 1;
  if (page.next) state.cursors.push(page.next);
  $('prev').disabled = state.index === 0;
  $('next').disabled = !page.next;
  $('page').textContent = 'page ' + (state.index + 1);
}

async function loadDeadLetters(more) {
  const q = new URLSearchParams({ limit: '25' });
  if (state.prefix) q.set('prefix', state.prefix);
  if (more && state.deadAfter) q.set('after', state.deadAfter);
  const page = await api('dead-letters?' + q);
  const body = $('dead-letters');
  if (!more) body.replaceChildren();
  for (const d of page.items) {
    const row = el('tr');
    row.dataset.key = d.key;
    cell(row, d.key, 'key');
    cell(row, d.type);
    cell(row, d.error, 'error');
    cell(row, d.attempts);
    cell(row, when(d.deadAt), 'when');
    dataCell(row, d.data);
    const last = cell(row, '');
    if (actions) last.appendChild(actionButton('Retry', 'retry-dead-letter', d.key, 'Schedule the dead letter ' + d.key + ' again, now?'));
    body.appendChild(row);
  }
  if (!more && page.items.length === 0) { const row = el('tr'); const td = cell(row, 'no dead letters', 'muted'); td.colSpan = 7; body.appendChild(row); }
  state.deadAfter = page.next;
  $('dead-more').hidden = !page.next;
}

async function loadRecurring() {
  const q = new URLSearchParams();
  if (state.prefix) q.set('prefix', state.prefix);
  const page = await api('recurring?' + q);
  const body = $('recurring');
  body.replaceChildren();
  for (const s of page.items) {
    const row = el('tr');
    cell(row, s.key, 'key');
    cell(row, s.type);
    cell(row, s.recurrence.spec);
    cell(row, s.recurrence.count);
    cell(row, s.recurrence.next.map(when).join('  ·  '));
    body.appendChild(row);
  }
  if (page.items.length === 0) { const row = el('tr'); const td = cell(row, 'no recurring schedules', 'muted'); td.colSpan = 5; body.appendChild(row); }
  $('recurring-note').textContent = page.complete ? '' : 'looked at the first ' + page.scanned + ' schedules';
}

async function loadGroups() {
  const { groups } = await api('groups');
  const box = $('groups');
  box.replaceChildren();
  for (const g of groups) {
    const div = el('div', null, 'group');
    div.dataset.group = g.group;
    div.appendChild(el('strong', g.namespace + ' / ' + g.environment + ' / ' + g.group));
    const leader = g.leader
      ? 'leader ' + g.leader.owner + ', epoch ' + g.leader.epoch + ', lease expires in ' + ms(g.leader.remainingMs)
      : g.readable ? 'no leader (nobody holds the lease, or it expired)' : 'leadership unknown (the leases could not be read)';
    div.appendChild(el('div', leader, 'leader'));
    if (g.schedules.length > 0) {
      const t = el('table'); const head = el('tr');
      for (const h of ['schedule', 'cursor (last decided)', 'next', 'running']) head.appendChild(el('th', h));
      t.appendChild(head);
      for (const s of g.schedules) { const r = el('tr'); cell(r, s.id, 'key'); cell(r, when(s.cursor)); cell(r, when(s.next)); cell(r, s.running ?? ''); t.appendChild(r); }
      div.appendChild(t);
    }
    if (g.history) {
      div.appendChild(el('div', 'recent history (this process)', 'muted'));
      const t = el('table'); const head = el('tr');
      for (const h of ['schedule', 'intended', 'state', 'reason', 'epoch', 'error']) head.appendChild(el('th', h));
      t.appendChild(head);
      for (const r of g.history.slice(0, 15)) { const row = el('tr'); cell(row, r.schedule, 'key'); cell(row, when(r.intendedAt)); cell(row, r.state); cell(row, r.reason || ''); cell(row, r.epoch ?? ''); cell(row, r.error || '', 'error'); t.appendChild(row); }
      div.appendChild(t);
    } else div.appendChild(el('div', 'history is kept by each scheduler in memory: mount the dashboard in the scheduler\'s process to see it', 'muted'));
    box.appendChild(div);
  }
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) { const e = document.createElementNS(SVG, tag); for (const k in attrs) e.setAttribute(k, attrs[k]); return e; }

async function loadLateness() {
  const { samples, intervalMs } = await api('lateness');
  const box = $('chart');
  box.replaceChildren();
  const W = 900, H = 120, L = 50, B = 18;
  const s = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, width: '100%', height: H, role: 'img', 'aria-label': 'lateness chart' });
  const withDeliveries = samples.some((p) => p.delivered !== undefined);
  const series = [{ key: 'oldestDueMs', color: '#2f6fde', name: 'oldest due waits' }];
  if (withDeliveries) series.push({ key: 'maxLatenessMs', color: '#d9822b', name: 'max delivery lateness' });
  const max = Math.max(1000, ...samples.flatMap((p) => series.map((x) => p[x.key] || 0)));
  const x = (i) => L + (samples.length <= 1 ? 0 : (i * (W - L - 10)) / (samples.length - 1));
  const y = (v) => H - B - (v / max) * (H - B - 8);
  s.appendChild(svg('line', { x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: '#c9ced6' }));
  const top = svg('text', { x: 4, y: 12 }); top.textContent = ms(max); s.appendChild(top);
  const zero = svg('text', { x: 4, y: H - B }); zero.textContent = '0'; s.appendChild(zero);
  if (samples.length > 0) {
    const first = svg('text', { x: L, y: H - 4 }); first.textContent = when(samples[0].at); s.appendChild(first);
    const last = svg('text', { x: W - 130, y: H - 4 }); last.textContent = when(samples[samples.length - 1].at); s.appendChild(last);
  }
  for (const line of series) {
    const points = samples.map((p, i) => x(i).toFixed(1) + ',' + y(p[line.key] || 0).toFixed(1)).join(' ');
    s.appendChild(svg('polyline', { points, fill: 'none', stroke: line.color, 'stroke-width': 2 }));
    if (samples.length > 0) {
      const i = samples.length - 1;
      s.appendChild(svg('circle', { cx: x(i).toFixed(1), cy: y(samples[i][line.key] || 0).toFixed(1), r: 3, fill: line.color }));
    }
  }
  box.appendChild(s);
  $('lateness-note').textContent = series.map((x) => x.name).join(', ') + '; one sample every ' + ms(intervalMs) + ', ' + samples.length + ' so far';
}

async function refresh() {
  try {
    $('error').hidden = true;
    await loadOverview();
    await Promise.all([loadSchedules(), loadDeadLetters(false), loadRecurring(), loadGroups(), loadLateness()]);
    document.body.dataset.loaded = String(Date.now());
  } catch (error) { showError(error); }
}

$('search').addEventListener('submit', (e) => {
  e.preventDefault();
  state.prefix = $('prefix').value.trim();
  state.due = $('due-only').checked;
  state.cursors = [undefined];
  state.index = 0;
  refresh();
});
$('next').addEventListener('click', () => { state.index++; loadSchedules().catch(showError); });
$('prev').addEventListener('click', () => { if (state.index > 0) { state.index--; loadSchedules().catch(showError); } });
$('dead-more').addEventListener('click', () => loadDeadLetters(true).catch(showError));
$('refresh').addEventListener('click', refresh);
$('login').addEventListener('submit', (e) => {
  e.preventDefault();
  token = $('token').value;
  sessionStorage.setItem('duetime-token', token);
  $('login').hidden = true;
  refresh();
});
if (TOKEN_REQUIRED && !token) $('login').hidden = false;
else refresh();
setInterval(() => { loadOverview().then(loadLateness).catch(() => {}); }, 5000);
`;
