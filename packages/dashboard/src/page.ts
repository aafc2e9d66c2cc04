import { STYLE } from './page-style.js';

/**
 * The status page: one HTML document with its style and script inline (allowed by a per-response CSP
 * nonce), no framework and no external resource. The script reads the JSON API next to it and builds
 * every element with `textContent`, so whatever a message holds is shown as text, never as markup. Each
 * user value sits in its own `<bdi>` with its control and bidirectional characters written as `\uXXXX`,
 * and a long one is cut in its cell behind a "show all" control: no value reorders, hides or pushes aside
 * what is around it.
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
  <form id="login" hidden data-testid="login">
    <p>This dashboard needs its token.</p>
    <p id="login-note" class="error" hidden data-testid="login-note"></p>
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
    <div class="scroll"><table data-testid="schedules"><colgroup><col class="c-key"><col class="c-type"><col class="c-when"><col class="c-when"><col class="c-n"><col class="c-error"><col class="c-data"><col class="c-act"></colgroup><thead><tr><th>key</th><th>type</th><th>deadline</th><th>due</th><th>attempts</th><th>last error</th><th>data</th><th class="act"></th></tr></thead><tbody id="schedules"></tbody></table></div>
    <div class="row"><button id="prev" type="button" data-testid="prev">← Previous</button><span id="page" data-testid="page"></span><button id="next" type="button" data-testid="next">Next →</button></div>
  </section>
  <section>
    <h2>Dead letters</h2>
    <div class="scroll"><table data-testid="dead-letters"><colgroup><col class="c-key"><col class="c-type"><col class="c-error"><col class="c-n"><col class="c-when"><col class="c-data"><col class="c-act"></colgroup><thead><tr><th>key</th><th>type</th><th>error</th><th>attempts</th><th>dead since</th><th>data</th><th class="act"></th></tr></thead><tbody id="dead-letters"></tbody></table></div>
    <div class="row"><button id="dead-more" type="button" hidden>More</button></div>
  </section>
  <section>
    <h2>Recurring schedules</h2>
    <div class="scroll"><table data-testid="recurring"><colgroup><col class="c-key"><col class="c-type"><col class="c-spec"><col class="c-n"><col class="c-next"></colgroup><thead><tr><th>key</th><th>type</th><th>spec</th><th>runs</th><th>next occurrences</th></tr></thead><tbody id="recurring"></tbody></table></div>
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

const SCRIPT = String.raw`
'use strict';
const $ = (id) => document.getElementById(id);
let csrf = '';
let actions = false;
const state = { cursors: [undefined], index: 0, prefix: '', due: false, deadAfter: undefined };
// How much of a value a table cell shows before "show all" (characters).
const SHORT = { key: 120, type: 80, id: 80, error: 240, data: 200, spec: 120 };

function stored() { try { return sessionStorage.getItem('duetime-token') || ''; } catch { return ''; } }
function remember(value) { try { sessionStorage.setItem('duetime-token', value); } catch { /* private mode: kept in memory */ } }

// The token: from the tab's session storage, or from #token= in the address (which never reaches the
// server, and is removed from the address bar). A #token= that is not valid percent-encoding is dropped
// and the page asks for the token.
let token = stored();
let tokenNote = '';
if (location.hash.startsWith('#token=')) {
  const raw = location.hash.slice(7);
  history.replaceState(null, '', location.pathname + location.search);
  let given = '';
  try { given = decodeURIComponent(raw); } catch { given = ''; }
  if (given) { token = given; remember(token); }
  else {
    token = '';
    tokenNote = 'The token in the address could not be read (it is empty or not valid percent-encoding): enter it here.';
  }
}

// Characters that hide or reorder text: C0 and C1 controls, bidirectional embeddings, overrides, isolates
// and marks, zero-width and other invisible format characters. Wherever user text is shown they appear as
// a marked \uXXXX, so that no value can reorder or hide what is around it or inside it.
const HIDDEN = /[\u0000-\u001F\u007F-\u009F\u00AD\u061C\u115F\u1160\u180E\u200B-\u200F\u2028-\u202E\u2060-\u206F\u3164\uFEFF\uFFA0\uFFF9-\uFFFB]/g;
function code(c) { return '\\u' + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0'); }
/** The text with each hidden character written as \uXXXX: for attributes and other plain strings. */
function visible(text) { return String(text).replace(HIDDEN, code); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

/** User text, isolated in a <bdi>, each hidden character shown as a marked \uXXXX (newlines kept if asked). */
function userText(text, keepNewlines) {
  const box = document.createElement('bdi');
  const s = String(text);
  let last = 0;
  for (const m of s.matchAll(HIDDEN)) {
    if (keepNewlines && m[0] === '\n') continue;
    if (m.index > last) box.appendChild(document.createTextNode(s.slice(last, m.index)));
    const mark = el('span', code(m[0]), 'esc');
    mark.title = 'U+' + code(m[0]).slice(2);
    box.appendChild(mark);
    last = m.index + 1;
  }
  if (last < s.length) box.appendChild(document.createTextNode(s.slice(last)));
  return box;
}

/** The first n characters of s, never splitting a surrogate pair. */
function cut(s, n) {
  const c = s.charCodeAt(n - 1);
  return s.slice(0, c >= 0xd800 && c <= 0xdbff ? n - 1 : n);
}

/**
 * A user value of bounded size: the value itself when short, else its start and a control that shows
 * all of it (a <details>). With pre, the value is shown in a <pre> (JSON data, kept as written). With
 * full (an API path), the text is only the start of the value, cut by the server: opening the control
 * asks the server for the whole value once.
 */
function bounded(text, limit, options) {
  const s = String(text);
  const pre = Boolean(options && options.pre);
  const newlines = Boolean(options && options.newlines);
  const holder = (node) => { const box = el(pre ? 'pre' : 'div'); box.appendChild(node); return box; };
  if (options && options.full) return onDemand(s, limit, options.full, holder, newlines);
  if (s.length <= limit) return pre ? holder(userText(s, newlines)) : userText(s, newlines);
  const details = el('details', null, 'long');
  const summary = el('summary');
  summary.appendChild(userText(cut(s, limit) + '…', newlines));
  summary.appendChild(document.createTextNode(' '));
  const more = el('span', 'show all ' + s.length + ' characters', 'more');
  summary.appendChild(more);
  details.appendChild(summary);
  details.appendChild(holder(userText(s, newlines)));
  details.addEventListener('toggle', () => {
    more.textContent = details.open ? 'hide' : 'show all ' + s.length + ' characters';
  });
  return details;
}

/**
 * The start of a value the server cut (its first characters, s) and a control that loads all of it from
 * path (an API read answering { item: { data } }) the first time it is opened.
 */
function onDemand(s, limit, path, holder, newlines) {
  const details = el('details', null, 'long');
  details.dataset.full = 'pending';
  const summary = el('summary');
  summary.appendChild(userText(cut(s, Math.min(limit, s.length)) + '…', newlines));
  summary.appendChild(document.createTextNode(' '));
  const label = 'load the full value';
  const more = el('span', label, 'more');
  summary.appendChild(more);
  details.appendChild(summary);
  const box = holder(userText(s + '…', newlines));
  details.appendChild(box);
  let full;
  details.addEventListener('toggle', async () => {
    more.textContent = details.open ? 'hide' : full === undefined ? label : 'show all ' + full.length + ' characters';
    if (!details.open || details.dataset.full !== 'pending') return;
    details.dataset.full = 'loading';
    try {
      const answer = await api(path);
      full = answer.item && typeof answer.item.data === 'string' ? answer.item.data : '';
      box.replaceChildren(userText(full, newlines));
      details.dataset.full = 'loaded';
    } catch (error) {
      const note = el('div', 'could not load the full value: ', 'error');
      note.appendChild(userText(String((error && error.message) || error)));
      box.replaceChildren(userText(s + '…', newlines), note);
      details.dataset.full = 'pending';
    }
  });
  return details;
}

/** A cell of the page's own text (dates, counts). */
function cell(row, text, cls) { const td = el('td', text, cls); row.appendChild(td); return td; }
/** A cell holding a user value (bounded, isolated, hidden characters shown); empty when there is none. */
function userCell(row, text, limit, cls, options) {
  const td = el('td', null, cls);
  if (text !== undefined && text !== null && text !== '') td.appendChild(bounded(text, limit, options));
  row.appendChild(td);
  return td;
}
function when(iso) { return iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : ''; }
function ms(n) { return n < 1000 ? n + ' ms' : n < 120000 ? (n / 1000).toFixed(1) + ' s' : (n / 60000).toFixed(1) + ' min'; }
function count(c) { return c.count + (c.more ? '+' : ''); }

function askToken(note) {
  $('login').hidden = false;
  $('login-note').hidden = !note;
  $('login-note').textContent = note || '';
}

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
  if (res.status === 401) { askToken(token ? 'That token was refused.' : ''); throw new Error(json.error || 'token required'); }
  if (!res.ok) throw new Error(json.error || ('HTTP ' + res.status));
  return json;
}

function showError(error) {
  $('error').hidden = false;
  $('error').replaceChildren(userText(String((error && error.message) || error), true));
}

/**
 * Asks before an action. parts: the page's own words (strings) and user values ({ user: text }), each
 * value isolated in its own element with its hidden characters shown, so it cannot reorder the question.
 */
function confirmAction(parts) {
  return new Promise((resolve) => {
    const dialog = $('confirm');
    const text = $('confirm-text');
    text.replaceChildren();
    for (const part of parts) {
      if (typeof part === 'string') text.appendChild(document.createTextNode(part));
      else { const value = el('code', null, 'user'); value.appendChild(userText(part.user)); text.appendChild(value); }
    }
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
  // What the button does, with the key's hidden characters shown (its tooltip and accessible name).
  b.title = label + ' ' + visible(key);
  b.setAttribute('aria-label', b.title);
  b.addEventListener('click', () => act(action, key, question));
  return b;
}

async function loadOverview() {
  const o = await api('overview');
  csrf = o.csrf;
  actions = o.actions;
  document.body.classList.toggle('actions', actions);
  $('label').replaceChildren(userText(o.label));
  $('label').title = visible(o.label);
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
    userCell(row, s.key, SHORT.key, 'key');
    userCell(row, s.type, SHORT.type, 'type');
    cell(row, when(s.at), 'when');
    cell(row, s.paused ? 'paused since ' + when(s.paused) : s.dueAt !== s.at ? when(s.dueAt) : '', 'when');
    cell(row, s.attempts || '');
    userCell(row, s.lastError, SHORT.error, 'error', { newlines: true });
    userCell(row, s.data, SHORT.data, 'data', { pre: true, full: s.dataCut ? 'schedule?' + new URLSearchParams({ key: s.key }) : undefined });
    const last = cell(row, '', 'act');
    if (actions) {
      if (s.paused) last.appendChild(actionButton('Resume', 'resume', s.key, ['Resume the schedule ', { user: s.key }, '? Occurrences missed while paused follow its catch-up rule.']));
      else last.appendChild(actionButton('Pause', 'pause', s.key, ['Pause the schedule ', { user: s.key }, '? Its own deliveries wait until it is resumed.']));
      last.appendChild(actionButton('Trigger', 'trigger', s.key, ['Deliver the schedule ', { user: s.key }, ' once more, now? Its deadline does not move.']));
      last.appendChild(actionButton('Cancel', 'cancel', s.key, ['Cancel the schedule ', { user: s.key }, '? It will not be delivered.']));
    }
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
    userCell(row, d.key, SHORT.key, 'key');
    userCell(row, d.type, SHORT.type, 'type');
    userCell(row, d.error, SHORT.error, 'error', { newlines: true });
    cell(row, d.attempts);
    cell(row, when(d.deadAt), 'when');
    userCell(row, d.data, SHORT.data, 'data', { pre: true, full: d.dataCut ? 'dead-letter?' + new URLSearchParams({ key: d.key }) : undefined });
    const last = cell(row, '', 'act');
    if (actions) last.appendChild(actionButton('Retry', 'retry-dead-letter', d.key, ['Schedule the dead letter ', { user: d.key }, ' again, now?']));
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
    row.dataset.key = s.key;
    userCell(row, s.key, SHORT.key, 'key');
    userCell(row, s.type, SHORT.type, 'type');
    userCell(row, s.recurrence.spec, SHORT.spec, 'spec');
    cell(row, s.recurrence.count);
    cell(row, s.recurrence.next.map(when).join('  ·  '));
    body.appendChild(row);
  }
  if (page.items.length === 0) { const row = el('tr'); const td = cell(row, 'no recurring schedules', 'muted'); td.colSpan = 5; body.appendChild(row); }
  $('recurring-note').textContent = page.complete ? '' : 'showing the first ' + page.scanned + ' recurring schedules';
}

/** A line of the page's words and user values ({ user }), as confirmAction takes them. */
function line(tag, parts, cls) {
  const e = el(tag, null, cls);
  for (const part of parts) e.appendChild(typeof part === 'string' ? document.createTextNode(part) : bounded(part.user, SHORT.id));
  return e;
}

function table(headings, widths) {
  const box = el('div', null, 'scroll');
  const t = el('table');
  const cols = el('colgroup');
  for (const w of widths) { const c = el('col'); if (w) c.style.width = w; cols.appendChild(c); }
  t.appendChild(cols);
  const head = el('tr');
  for (const h of headings) head.appendChild(el('th', h));
  t.appendChild(head);
  box.appendChild(t);
  return { box, t };
}

async function loadGroups() {
  const { groups } = await api('groups');
  const box = $('groups');
  box.replaceChildren();
  for (const g of groups) {
    const div = el('div', null, 'group');
    div.dataset.group = g.group;
    div.appendChild(line('strong', [{ user: g.namespace }, ' / ', { user: g.environment }, ' / ', { user: g.group }]));
    const leader = g.leader
      ? ['leader ', { user: g.leader.owner }, ', epoch ' + g.leader.epoch + ', lease expires in ' + ms(g.leader.remainingMs)]
      : [g.readable ? 'no leader (nobody holds the lease, or it expired)' : 'leadership unknown (the leases could not be read)'];
    div.appendChild(line('div', leader, 'leader'));
    if (g.schedules.length > 0) {
      const { box: holder, t } = table(['schedule', 'cursor (last decided)', 'next', 'running'], ['', '12em', '12em', '6em']);
      for (const s of g.schedules) { const r = el('tr'); userCell(r, s.id, SHORT.id, 'key'); cell(r, when(s.cursor)); cell(r, when(s.next)); cell(r, s.running ?? ''); t.appendChild(r); }
      div.appendChild(holder);
    }
    if (g.history) {
      div.appendChild(el('div', 'recent history (this process)', 'muted'));
      const { box: holder, t } = table(['schedule', 'intended', 'state', 'reason', 'epoch', 'error'], ['20%', '11em', '7em', '10em', '5em', '']);
      for (const r of g.history.slice(0, 15)) { const row = el('tr'); userCell(row, r.schedule, SHORT.id, 'key'); cell(row, when(r.intendedAt)); cell(row, r.state); cell(row, r.reason || ''); cell(row, r.epoch ?? ''); userCell(row, r.error, SHORT.error, 'error', { newlines: true }); t.appendChild(row); }
      div.appendChild(holder);
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
  if (!token) return;
  remember(token);
  $('login').hidden = true;
  refresh();
});
if (TOKEN_REQUIRED && !token) askToken(tokenNote);
else refresh();
setInterval(() => { loadOverview().then(loadLateness).catch(() => {}); }, 5000);
`;
