// The operator's live view (read-only). Every string from the daemon is put in the page as text
// (textContent), never as markup; the page holds at most kMaxEvents events. Lifecycle events
// arrive pushed (Server-Sent Events on /ui/events); each one refreshes the fleet's table once
// things settle.
'use strict';

const kMaxEvents = 200;
const kRefreshDelayMilliseconds = 200;
const kReopenDelayMilliseconds = 2000;

let lastEvent = 0;
let stream = null;
let refreshTimer = null;
let listing = null;
let ticking = null;
let usage = null;  // serve's /ui/api/usage: each sandbox's figures as last sampled

function element(id) { return document.getElementById(id); }

function cell(text, className) {
  const td = document.createElement('td');
  if (className) {
    const span = document.createElement('span');
    span.className = className;
    span.textContent = text;
    td.appendChild(span);
  } else {
    td.textContent = text;
  }
  if (text) td.title = text;
  return td;
}

function duration(seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 60) return Math.floor(seconds) + 's';
  if (seconds < 3600) return Math.floor(seconds / 60) + 'm ' + Math.floor(seconds % 60) + 's';
  return Math.floor(seconds / 3600) + 'h ' + Math.floor((seconds % 3600) / 60) + 'm';
}

async function api(path) {
  const answer = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
  if (answer.status === 401) throw new Error('unauthorized');
  if (!answer.ok) throw new Error(path + ': ' + answer.status);
  return answer.json();
}

function closeStream() {
  if (stream) { stream.close(); stream = null; }
  if (ticking) { clearInterval(ticking); ticking = null; }
  stopFlow();
}

function showLogin(message) {
  closeStream();
  element('fleet').hidden = true;
  element('logout').hidden = true;
  element('login').hidden = false;
  element('login-error').textContent = message || '';
  element('status').textContent = '';
}

function renderCounts(health) {
  const counts = element('counts');
  counts.replaceChildren();
  // serve counts active, warm and paused sandboxes; sandboxd-provisioner running ones.
  element('daemon').textContent = health.running === undefined ? 'serve' : 'provisioner';
  // Creating and tearing down are shown while there are any.
  for (const state of ['active', 'warm', 'paused', 'creating', 'tearing_down', 'running']) {
    if (health[state] === undefined) continue;
    if ((state === 'creating' || state === 'tearing_down') && health[state] === 0) continue;
    const li = document.createElement('li');
    li.id = 'count-' + state;
    const number = document.createElement('b');
    number.textContent = String(health[state]);
    li.append(number, state.replace('_', ' '));
    counts.appendChild(li);
  }
  if (health.network_mode) {
    const li = document.createElement('li');
    li.textContent = 'network ' + health.network_mode;
    counts.appendChild(li);
  }
}

function renderSandboxes() {
  if (!listing) return;
  const now = Date.now() / 1000;
  const body = element('sandboxes');
  body.replaceChildren();
  for (const sandbox of listing.sandboxes) {
    const row = document.createElement('tr');
    row.dataset.sandbox = sandbox.sandbox_id;
    row.dataset.state = sandbox.state;
    row.append(
      cell(sandbox.sandbox_id),
      cell(sandbox.state, 'state state-' + sandbox.state),
      cell(sandbox.user_id || ''),
      cell(sandbox.thread_id || ''),
      cell(sandbox.since == null ? '' : duration(now - sandbox.since)),
      cell(sandbox.last_acquire || '', 'path'),
      ...usageCells(sandbox),
      cell(diskText(sandbox), 'disk'));
    body.appendChild(row);
  }
  element('sandboxes-empty').hidden = listing.sandboxes.length !== 0;
}

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? String(n) : n.toFixed(1)) + ' ' + units[i];
}

// The conversation's storage against its bound (docs/storage.md): "unbounded" where serve
// says there is none, empty where the daemon does not say (the provisioner, an orphan).
// An archived conversation's row leads with its archive's size.
function diskText(sandbox) {
  const bound = sandbox.disk ? bytes(sandbox.disk.bytes) + ' / ' + bytes(sandbox.disk.limit) : '';
  if (sandbox.state === 'archived') {
    return 'archive ' + bytes(sandbox.archived_bytes) + (bound ? '; ' + bound : '');
  }
  if (sandbox.disk === undefined || sandbox.tracked === false) return '';
  return sandbox.disk === null ? 'unbounded' : bound;
}

// CPU, memory and processes of one sandbox from the last sample; empty where the daemon
// samples nothing (the provisioner, an orphan), '…' until a figure is in.
function usageCells(sandbox) {
  if (!usage || !usage.available || sandbox.tracked === false) return [cell(''), cell(''), cell('')];
  const figures = usage.sandboxes[sandbox.sandbox_id];
  if (!figures) return [cell('…', 'usage'), cell('…', 'usage'), cell('…', 'usage')];
  if (figures.error) {
    const failed = cell('unavailable', 'usage');
    failed.title = figures.error;
    return [failed, cell(''), cell('')];
  }
  const memory = figures.memory_bytes == null ? '' : bytes(figures.memory_bytes) +
      (figures.memory_limit_bytes == null ? '' : ' / ' + bytes(figures.memory_limit_bytes));
  return [
    cell(figures.cpu_percent == null ? '…' : figures.cpu_percent.toFixed(1) + ' %', 'usage cpu'),
    cell(memory, 'usage memory'),
    cell(figures.pids == null ? '' : String(figures.pids), 'usage pids'),
  ];
}

function renderEvent(event) {
  const body = element('events');
  const row = document.createElement('tr');
  row.dataset.kind = event.kind;
  row.dataset.sandbox = event.sandbox_id;
  row.append(
    cell(String(event.sequence)),
    cell(new Date(event.time * 1000).toLocaleTimeString()),
    cell(event.kind),
    cell(event.sandbox_id),
    cell(event.user_id || ''),
    cell(event.thread_id || ''),
    cell(event.reason));
  body.insertBefore(row, body.firstChild);
  while (body.childElementCount > kMaxEvents) body.removeChild(body.lastChild);
}

// The Flow panel (serve only: the provisioner answers 404 and the panel stays hidden). Rates
// come from the difference between two readings.
const kFlowMilliseconds = 5000;
let flowTimer = null;
let usageTimer = null;  // both daemons sample usage; it is polled on its own timer
let lastFlow = null;

function milliseconds(seconds) {
  return seconds < 1 ? (seconds * 1000) + ' ms' : seconds + ' s';
}

function renderFlow(flow, previous, elapsed) {
  const acquires = element('flow-acquires');
  acquires.replaceChildren();
  for (const [path, total] of Object.entries(flow.acquires)) {
    const row = document.createElement('tr');
    row.dataset.path = path;
    const before = previous ? previous.acquires[path] : total;
    const rate = elapsed > 0 ? (total - before) / elapsed : 0;
    row.append(cell(path), cell(String(total)), cell(rate.toFixed(2)));
    acquires.appendChild(row);
  }
  const refusals = element('flow-refusals');
  refusals.replaceChildren();
  const lines = [];
  for (const [reason, n] of Object.entries(flow.capacity_rejections)) lines.push(['refused: ' + reason, n]);
  for (const [kind, n] of Object.entries(flow.acquire_failures)) lines.push(['failed: ' + kind, n]);
  lines.push(['slots ready / kept', flow.slots.ready + ' / ' + flow.slots.target]);
  lines.push(['slot claims', flow.slots.claims]);
  for (const [reason, n] of Object.entries(flow.slots.misses)) lines.push(['slot miss: ' + reason, n]);
  if (flow.slots.off_reason) lines.push(['slots off', flow.slots.off_reason]);
  for (const [reason, n] of Object.entries(flow.relay_refusals || {})) lines.push(['relay refused: ' + reason, n]);
  for (const [reason, n] of Object.entries(flow.egress_refusals || {})) lines.push(['egress denied: ' + reason, n]);
  lines.push(['queued for capacity', flow.capacity_queue.waits]);
  lines.push(['evicted / reaped', flow.evictions + ' / ' + flow.idle_reaps]);
  for (const [what, n] of lines) {
    const row = document.createElement('tr');
    row.append(cell(what), cell(String(n)));
    refusals.appendChild(row);
  }
  renderCapacity(flow.capacity);
  const histogram = element('flow-latency');
  histogram.replaceChildren();
  const most = Math.max(1, ...flow.latency.counts);
  flow.latency.counts.forEach((n, i) => {
    const li = document.createElement('li');
    const label = document.createElement('span');
    label.className = 'le';
    label.textContent = i < flow.latency.bounds.length ? '≤ ' + milliseconds(flow.latency.bounds[i]) : 'more';
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.style.width = (12 * n / most) + 'em';  // CSSOM, which the policy allows; no style attribute
    const count = document.createElement('span');
    count.className = 'n';
    count.textContent = String(n);
    li.append(label, bar, count);
    histogram.appendChild(li);
  });
}

// The ceilings beside what counts against them: this process's sandboxes, the deployment's
// reservations when a shared ledger holds the ceilings, the busiest user here, the queue.
function renderCapacity(capacity) {
  const body = element('flow-capacity');
  body.replaceChildren();
  if (!capacity) return;
  const none = 'none';
  const rows = [
    ['replicas', 'sandboxes here', String(capacity.in_use_here),
     capacity.replicas + (capacity.overflow_policy === 'soft' ? ' (soft)' : ' (' + capacity.overflow_policy + ')')],
    ['fleet', 'reserved, all gateways',
     capacity.fleet_wide ? (capacity.fleet_reserved == null ? 'unreadable: ' + capacity.fleet_error : String(capacity.fleet_reserved))
                         : 'per gateway',
     capacity.fleet_wide ? String(capacity.replicas) : ''],
  ];
  let busiest = null;
  if (listing) {
    const perUser = new Map();
    for (const sandbox of listing.sandboxes) {
      if (!sandbox.tracked && sandbox.tracked !== undefined) continue;
      const user = sandbox.user_id || '';
      perUser.set(user, (perUser.get(user) || 0) + 1);
    }
    for (const [user, n] of perUser) if (!busiest || n > busiest[1]) busiest = [user, n];
  }
  rows.push(['per_user', 'busiest user' + (busiest ? ' ' + busiest[0] : ''), busiest ? String(busiest[1]) : '0',
             capacity.max_per_user > 0 ? String(capacity.max_per_user) : none]);
  rows.push(['queue', 'queued for a slot', String(capacity.waiting),
             capacity.overflow_policy !== 'wait' ? '' : capacity.max_waiting > 0 ? String(capacity.max_waiting) : 'unbounded']);
  if (capacity.overflow_policy === 'burst') rows.push(['burst', 'beyond replicas', '', String(capacity.burst_limit)]);
  for (const [key, what, now, ceiling] of rows) {
    const row = document.createElement('tr');
    row.dataset.ceiling = key;
    row.append(cell(what), cell(now), cell(ceiling));
    body.appendChild(row);
  }
}

async function pollFlow() {
  let flow;
  try {
    const answer = await fetch('/ui/api/flow', { credentials: 'same-origin', cache: 'no-store' });
    if (answer.status === 404) {  // a daemon without the panel: it stays hidden (usage goes on)
      if (flowTimer) { clearInterval(flowTimer); flowTimer = null; }
      element('flow').dataset.availability = 'none';
      return;
    }
    if (!answer.ok) return;
    flow = await answer.json();
  } catch (error) {
    return;
  }
  const now = Date.now() / 1000;
  renderFlow(flow, lastFlow && lastFlow.flow, lastFlow ? now - lastFlow.at : 0);
  lastFlow = { flow, at: now };
  element('flow').hidden = false;
}

// Asking is what keeps the daemon sampling; until its first sweep is in, ask again sooner.
async function pollUsage() {
  try {
    const answer = await fetch('/ui/api/usage', { credentials: 'same-origin', cache: 'no-store' });
    if (!answer.ok) return;
    usage = await answer.json();
  } catch (error) {
    return;
  }
  renderSandboxes();
  if (usage.available && usage.swept_at == null && usageTimer) setTimeout(pollUsage, 1000);
}

function startFlow() {
  stopFlow();
  pollFlow();
  pollUsage();
  flowTimer = setInterval(pollFlow, kFlowMilliseconds);
  usageTimer = setInterval(pollUsage, kFlowMilliseconds);
}

function stopFlow() {
  if (flowTimer) { clearInterval(flowTimer); flowTimer = null; }
  if (usageTimer) { clearInterval(usageTimer); usageTimer = null; }
}

async function refreshFleet() {
  const [health, listed] = await Promise.all([api('/ui/api/health'), api('/ui/api/sandboxes')]);
  listing = listed;
  renderCounts(health);
  renderSandboxes();
  element('status').textContent = 'live; updated ' + new Date().toLocaleTimeString();
}

function scheduleRefresh() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(async () => {
    refreshTimer = null;
    try {
      await refreshFleet();
    } catch (error) {
      if (error.message === 'unauthorized') showLogin('Your session ended; log in again.');
      else element('status').textContent = 'cannot reach the daemon: ' + error.message;
    }
  }, kRefreshDelayMilliseconds);
}

// The stream resumes after the last event shown, whether the browser reconnects by itself
// (Last-Event-ID) or the page opens it again.
function openStream() {
  closeStream();
  stream = new EventSource('/ui/events?after=' + lastEvent);
  stream.addEventListener('lifecycle', (message) => {
    const event = JSON.parse(message.data);
    if (event.sequence <= lastEvent) return;
    lastEvent = event.sequence;
    renderEvent(event);
    scheduleRefresh();
  });
  stream.addEventListener('dropped', (message) => {
    element('status').textContent = 'missed ' + message.data + ' events (no longer kept)';
  });
  stream.addEventListener('error', async () => {
    element('status').textContent = 'reconnecting…';
    try {
      await api('/ui/api/health');
    } catch (error) {
      if (error.message === 'unauthorized') { showLogin('Your session ended; log in again.'); return; }
    }
    if (stream && stream.readyState === EventSource.CLOSED) setTimeout(openStream, kReopenDelayMilliseconds);
  });
  ticking = setInterval(renderSandboxes, 1000);
  startFlow();
}

async function start() {
  try {
    await refreshFleet();
  } catch (error) {
    showLogin(error.message === 'unauthorized' ? '' : 'cannot reach the daemon: ' + error.message);
    return;
  }
  element('login').hidden = true;
  element('fleet').hidden = false;
  element('logout').hidden = false;
  openStream();
}

async function logIn(event) {
  event.preventDefault();
  const credential = element('credential').value;
  element('credential').value = '';
  const answer = await fetch('/ui/login', {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'Authorization': 'Bearer ' + credential },
  });
  if (answer.status !== 204) {
    element('login-error').textContent = answer.status === 401 ? 'Wrong token.' : 'Log-in failed: ' + answer.status;
    return;
  }
  await start();
}

async function logOut() {
  await fetch('/ui/logout', { method: 'POST', credentials: 'same-origin' });
  closeStream();
  lastEvent = 0;
  element('events').replaceChildren();
  showLogin('');
}

document.addEventListener('DOMContentLoaded', () => {
  element('login-form').addEventListener('submit', logIn);
  element('logout').addEventListener('click', logOut);
  start();
});
