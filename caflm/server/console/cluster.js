// The cluster dashboard: polls GET /v1/cluster every second for engines,
// totals and the recent series, and follows GET /v1/cluster/events for the
// timeline.
'use strict';

(() => {
  const { el, formatClock, formatDuration, formatNumber, formatPercent } = caflm;

  const POLL_INTERVAL_MS = 1000;
  const POLL_TIMEOUT_MS = 5000;
  const MAX_EVENTS = 200;
  // The server sends a keep-alive comment every ~15 s; three missed ones mean
  // the connection is dead even if the socket has not noticed.
  const EVENTS_IDLE_MS = 45000;
  const RECONNECT_MIN_MS = 1000;
  const RECONNECT_MAX_MS = 30000;

  const banner = document.getElementById('banner');
  const live = document.getElementById('live');
  const liveText = document.getElementById('live-text');
  const enginesEl = document.getElementById('engines');
  const timeline = document.getElementById('timeline');
  const eventsState = document.getElementById('events-state');

  let lastSnapshot = null;
  let lastUpdateAt = null;

  // --- status: live indicator and banner ------------------------------------

  function showLive() {
    lastUpdateAt = Date.now() / 1000;
    live.dataset.state = 'live';
    liveText.textContent = `live · updated ${formatClock(lastUpdateAt)}`;
    banner.hidden = true;
  }

  // message: the server's error; null when the server could not be reached.
  function showProblem(message) {
    const since = lastUpdateAt === null ? '' : ` Last update at ${formatClock(lastUpdateAt)}.`;
    live.dataset.state = 'offline';
    liveText.textContent = lastUpdateAt === null ? 'offline' : `offline · last update ${formatClock(lastUpdateAt)}`;
    banner.dataset.kind = message === null ? 'unreachable' : 'error';
    banner.textContent = message === null
      ? `Server unreachable: retrying every second.${since}`
      : `The server refused the cluster snapshot: ${message.replace(/\.$/, '')}.${since}`;
    banner.hidden = false;
  }

  // --- totals ----------------------------------------------------------------

  function renderTotals(requests) {
    const totals = {
      'total-running': formatNumber(requests.running, 0),
      'total-rps': formatNumber(requests.requests_per_second, 2),
      'total-requests': formatNumber(requests.total, 0),
      'total-failed': formatNumber(requests.failed, 0),
      'total-rejected': formatNumber(requests.rejected, 0),
      'total-failovers': formatNumber(requests.failovers, 0),
    };
    for (const [id, text] of Object.entries(totals)) document.getElementById(id).textContent = text;
  }

  // --- engines ---------------------------------------------------------------

  // name -> the card's parts, kept across polls so cards update in place.
  const engineViews = new Map();

  function statField(fields, key, label) {
    fields[key] = el('dd', { 'data-field': key });
    return el('div', { className: 'stat' }, el('dt', {}, label), fields[key]);
  }

  function buildEngineView(name) {
    const fields = {};
    const view = {
      fields,
      badge: el('span', { className: 'badge' }),
      kind: el('span', { className: 'kind' }),
      since: el('span', { 'data-field': 'state-duration' }),
      kvText: el('span', { 'data-field': 'kv-blocks' }),
      barFill: el('span', { className: 'bar-fill' }),
    };
    view.bar = el('div', { className: 'bar', role: 'progressbar', 'aria-label': 'KV blocks used', 'aria-valuemin': 0 }, view.barFill);
    view.root = el('article', { className: 'engine', 'data-engine': name },
      el('header', { className: 'engine-head' },
        el('h3', { className: 'engine-name', title: name }, name), view.badge),
      el('p', { className: 'since' }, view.kind, view.since),
      el('div', { className: 'kv' },
        el('div', { className: 'kv-label' }, el('span', {}, 'KV blocks'), view.kvText), view.bar),
      el('dl', { className: 'engine-stats' },
        statField(fields, 'running', 'Running'),
        statField(fields, 'waiting', 'Waiting'),
        statField(fields, 'tokens-per-second', 'Tokens/s'),
        statField(fields, 'prefix-cache-hit-rate', 'Prefix hits'),
        statField(fields, 'preemptions', 'Preemptions'),
        statField(fields, 'generated-tokens', 'Generated')));
    return view;
  }

  // `cached` of the `used` blocks hold only the prefix cache: evictable, so
  // they are told apart from blocks that running requests hold.
  function renderKv(view, used, total, cached) {
    const known = typeof used === 'number' && typeof total === 'number' && total > 0;
    const percent = known ? Math.min(100, (used / total) * 100) : 0;
    const cachedText = typeof cached === 'number' && cached > 0 ? `, ${cached} cached` : '';
    view.kvText.textContent = known ? `${used} / ${total} (${formatNumber(percent, 0)} %${cachedText})` : '–';
    view.kvText.title = 'blocks in use / all blocks; cached blocks hold only prefixes a new request can reuse';
    view.barFill.style.width = `${percent}%`;
    view.bar.dataset.level = percent >= 90 ? 'high' : percent >= 70 ? 'mid' : 'low';
    view.bar.setAttribute('aria-valuemax', known ? total : 0);
    view.bar.setAttribute('aria-valuenow', known ? used : 0);
  }

  function updateEngineView(view, engine, now) {
    const state = String(engine.state ?? 'unknown');
    view.root.dataset.state = state;
    view.badge.dataset.state = state;
    // A lost remote engine is being redialled: say so, keep the state.
    view.badge.textContent = engine.reconnecting ? `${state} · reconnecting` : state;
    view.kind.textContent = engine.kind ?? '';
    const hasSince = typeof engine.since === 'number';
    view.since.textContent = hasSince ? `${state} for ${formatDuration(now - engine.since)}` : '';
    view.since.title = hasSince ? `since ${formatClock(engine.since)}` : '';
    renderKv(view, engine.kv_blocks_used, engine.kv_blocks_total, engine.kv_blocks_cached);
    const values = {
      running: formatNumber(engine.running, 0),
      waiting: formatNumber(engine.waiting, 0),
      'tokens-per-second': formatNumber(engine.tokens_per_second, 1),
      'prefix-cache-hit-rate': formatPercent(engine.prefix_cache_hit_rate),
      preemptions: formatNumber(engine.preemptions, 0),
      'generated-tokens': formatNumber(engine.generated_tokens, 0),
    };
    for (const [key, text] of Object.entries(values)) view.fields[key].textContent = text;
  }

  function renderEngines(engines, now) {
    const seen = new Set();
    engines.forEach((engine, index) => {
      const name = String(engine.name);
      seen.add(name);
      if (!engineViews.has(name)) engineViews.set(name, buildEngineView(name));
      const view = engineViews.get(name);
      updateEngineView(view, engine, now);
      // Keep the server's order without moving cards that are already in place.
      const current = enginesEl.children[index] ?? null;
      if (current !== view.root) enginesEl.insertBefore(view.root, current);
    });
    for (const [name, view] of engineViews) {
      if (seen.has(name)) continue;
      view.root.remove();
      engineViews.delete(name);
    }
    enginesEl.querySelector('.placeholder')?.remove();
    if (engines.length === 0) enginesEl.append(el('p', { className: 'placeholder' }, 'No engines in this cluster.'));
  }

  // --- charts ----------------------------------------------------------------

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const CHART_HEIGHT = 180;
  const MARGIN = { top: 12, right: 12, bottom: 24, left: 44 };

  function percentileSeries(prefix) {
    return ['p50', 'p90', 'p99'].map((p) => ({ key: `${prefix}_${p}`, label: p, className: `series-${p}` }));
  }

  // What each chart draws; ms charts scale the server's seconds by 1000.
  const CHARTS = [
    {
      id: 'chart-rate', scale: 1, unit: '',
      lines: [{ key: 'requests_per_second', label: 'requests/s', className: 'series-rate' }],
      bars: { key: 'rejected', label: '429s', className: 'series-rejected' },
    },
    { id: 'chart-ttft', scale: 1000, unit: ' ms', lines: percentileSeries('ttft') },
    { id: 'chart-itl', scale: 1000, unit: ' ms', lines: percentileSeries('itl') },
  ];

  function svg(tag, attributes = {}, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
    node.append(...children);
    return node;
  }

  function valueOf(point, key, scale) {
    const value = point[key];
    return typeof value === 'number' && Number.isFinite(value) ? value * scale : null;
  }

  // A top of the y axis and a tick step of 1, 2, 2.5 or 5 times a power of
  // ten; an empty or all-zero chart gets 0..1 rather than a collapsed axis.
  function niceScale(max) {
    if (!(max > 0)) return { top: 1, step: 0.25 };
    const rough = max / 4;
    const magnitude = 10 ** Math.floor(Math.log10(rough));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= rough);
    return { top: step * Math.ceil(max / step - 1e-9), step };
  }

  function formatTick(value) {
    if (value >= 1000) return `${formatNumber(value / 1000, 1)}k`;
    return formatNumber(value, 2);
  }

  // A time-axis step that leaves room for each label (about 70 px).
  function timeStep(windowSeconds, plotWidth) {
    const intervals = Math.max(1, Math.min(5, Math.floor(plotWidth / 70)));
    const steps = [5, 10, 15, 30, 60, 120, 180, 300, 600, 900, 1800, 3600, 7200];
    return steps.find((s) => windowSeconds / s <= intervals) ?? windowSeconds / intervals;
  }

  function formatAgo(seconds) {
    if (seconds === 0) return 'now';
    return seconds % 60 === 0 ? `−${seconds / 60} min` : `−${seconds} s`;
  }

  function windowOf(series) {
    return series.window_seconds > 0 ? series.window_seconds : 600;
  }

  // The plot's coordinate system: the series window ending at `now`
  // across, 0..yScale.top up.
  function chartFrame(width, series, now, yScale) {
    const windowSeconds = windowOf(series);
    const plotWidth = width - MARGIN.left - MARGIN.right;
    const plotHeight = CHART_HEIGHT - MARGIN.top - MARGIN.bottom;
    const start = now - windowSeconds;
    return {
      width, windowSeconds, now, plotWidth, plotHeight,
      interval: series.interval_seconds > 0 ? series.interval_seconds : 5,
      x: (time) => MARGIN.left + ((time - start) / windowSeconds) * plotWidth,
      y: (value) => MARGIN.top + plotHeight * (1 - value / yScale.top),
    };
  }

  function drawAxes(frame, yScale) {
    const group = svg('g', { class: 'axes' });
    const right = MARGIN.left + frame.plotWidth;
    for (let value = 0; value <= yScale.top + 1e-9; value += yScale.step) {
      const y = frame.y(value);
      group.append(
        svg('line', { class: 'grid', x1: MARGIN.left, x2: right, y1: y, y2: y }),
        svg('text', { class: 'tick', x: MARGIN.left - 6, y: y + 4, 'text-anchor': 'end' }, formatTick(value)));
    }
    const step = timeStep(frame.windowSeconds, frame.plotWidth);
    const baseline = MARGIN.top + frame.plotHeight;
    for (let ago = 0; ago <= frame.windowSeconds + 1e-9; ago += step) {
      const x = frame.x(frame.now - ago);
      // "now" sits at the right edge, where a centred label would be cut off.
      const anchor = ago === 0 ? 'end' : 'middle';
      group.append(
        svg('line', { class: 'tick-mark', x1: x, x2: x, y1: baseline, y2: baseline + 4 }),
        svg('text', { class: 'tick', x, y: baseline + 16, 'text-anchor': anchor }, formatAgo(ago)));
    }
    group.append(svg('line', { class: 'axis', x1: MARGIN.left, x2: right, y1: baseline, y2: baseline }));
    return group;
  }

  // Splits a series into runs of consecutive values; a null value or a
  // missing interval ends a run, so the line shows a gap there.
  function runsOf(points, key, frame, scale) {
    const runs = [];
    let run = [];
    let previousTime = null;
    for (const point of points) {
      const value = valueOf(point, key, scale);
      const broken = value === null || (previousTime !== null && point.time - previousTime > 1.5 * frame.interval);
      if (broken && run.length) runs.push(run);
      if (broken) run = [];
      if (value === null) {
        previousTime = null;
        continue;
      }
      run.push([frame.x(point.time), frame.y(value)]);
      previousTime = point.time;
    }
    if (run.length) runs.push(run);
    return runs;
  }

  function drawLine(points, line, frame, scale) {
    const group = svg('g', { class: `series ${line.className}` });
    for (const run of runsOf(points, line.key, frame, scale)) {
      if (run.length === 1) {
        group.append(svg('circle', { cx: run[0][0], cy: run[0][1], r: 2.5 }));
        continue;
      }
      const d = run.map(([x, y], i) => `${i ? 'L' : 'M'}${x.toFixed(1)} ${y.toFixed(1)}`).join(' ');
      group.append(svg('path', { d }));
    }
    return group;
  }

  function drawBars(points, bars, frame, scale) {
    const group = svg('g', { class: `series ${bars.className}` });
    const slot = (frame.interval / frame.windowSeconds) * frame.plotWidth;
    const width = Math.max(2, Math.min(14, slot * 0.7));
    for (const point of points) {
      const value = valueOf(point, bars.key, scale);
      if (!value) continue;
      const top = frame.y(value);
      group.append(svg('rect', {
        x: frame.x(point.time) - width / 2, y: top, width, height: frame.y(0) - top,
      }));
    }
    return group;
  }

  function drawChart(spec, plot, series, now) {
    const points = (series.points ?? []).filter((p) => typeof p.time === 'number' && p.time >= now - windowOf(series));
    const keys = spec.lines.map((line) => line.key).concat(spec.bars ? [spec.bars.key] : []);
    const values = points.flatMap((p) => keys.map((key) => valueOf(p, key, spec.scale))).filter((v) => v !== null);
    const yScale = niceScale(Math.max(0, ...values));
    const frame = chartFrame(Math.max(240, plot.clientWidth), series, now, yScale);

    const chart = svg('svg', {
      width: frame.width, height: CHART_HEIGHT, viewBox: `0 0 ${frame.width} ${CHART_HEIGHT}`, role: 'img',
      'aria-label': plot.parentElement.querySelector('figcaption').textContent,
    }, drawAxes(frame, yScale));
    if (spec.bars) chart.append(drawBars(points, spec.bars, frame, spec.scale));
    for (const line of spec.lines) chart.append(drawLine(points, line, frame, spec.scale));
    if (values.length === 0) {
      chart.append(svg('text', {
        class: 'no-data', x: MARGIN.left + frame.plotWidth / 2, y: MARGIN.top + frame.plotHeight / 2, 'text-anchor': 'middle',
      }, 'no samples yet'));
    }
    plot.replaceChildren(chart);
    plot.parentElement.dataset.points = String(points.length);
  }

  function latestValue(points, key, scale) {
    for (let i = points.length - 1; i >= 0; i -= 1) {
      const value = valueOf(points[i], key, scale);
      if (value !== null) return value;
    }
    return null;
  }

  function legendItem(className, label) {
    const value = el('b', { className: 'legend-value' }, '–');
    return { item: el('li', {}, el('span', { className: `swatch ${className}` }), `${label} `, value), value };
  }

  // chart id -> its plot area and legend, built on the first snapshot.
  const chartParts = new Map();

  function buildChartParts(spec) {
    const figure = document.getElementById(spec.id);
    const plot = el('div', { className: 'chart-plot' });
    const legend = el('ul', { className: 'legend' });
    const entries = spec.lines.map((line) => legendItem(line.className, line.label));
    const barEntry = spec.bars ? legendItem(spec.bars.className, `${spec.bars.label} in window`) : null;
    legend.append(...entries.map((e) => e.item), ...(barEntry ? [barEntry.item] : []));
    figure.append(plot, legend);
    return { plot, entries, barEntry };
  }

  // The legend carries the newest value of each line and the window's 429 count.
  function updateLegend(spec, parts, points) {
    spec.lines.forEach((line, i) => {
      const value = latestValue(points, line.key, spec.scale);
      parts.entries[i].value.textContent = value === null ? '–' : `${formatNumber(value, value < 10 ? 2 : 1)}${spec.unit}`;
    });
    if (parts.barEntry) {
      const total = points.reduce((sum, p) => sum + (valueOf(p, spec.bars.key, 1) ?? 0), 0);
      parts.barEntry.value.textContent = formatNumber(total, 0);
    }
  }

  function windowLabel(series) {
    const windowSeconds = windowOf(series);
    const span = windowSeconds % 60 === 0 ? `${windowSeconds / 60} min` : `${windowSeconds} s`;
    return series.interval_seconds > 0 ? `last ${span} · ${series.interval_seconds} s intervals` : `last ${span}`;
  }

  function renderCharts(snapshot) {
    const series = snapshot.series ?? {};
    const now = typeof snapshot.time === 'number' ? snapshot.time : Date.now() / 1000;
    document.getElementById('charts-window').textContent = windowLabel(series);
    for (const spec of CHARTS) {
      if (!chartParts.has(spec.id)) chartParts.set(spec.id, buildChartParts(spec));
      const parts = chartParts.get(spec.id);
      drawChart(spec, parts.plot, series, now);
      updateLegend(spec, parts, series.points ?? []);
    }
  }

  // --- polling -----------------------------------------------------------------

  function render(snapshot) {
    lastSnapshot = snapshot;
    const now = typeof snapshot.time === 'number' ? snapshot.time : Date.now() / 1000;
    caflm.showModelName(snapshot.model);
    renderTotals(snapshot.requests ?? {});
    renderEngines(Array.isArray(snapshot.engines) ? snapshot.engines : [], now);
    renderCharts(snapshot);
  }

  async function fetchSnapshot() {
    let response;
    try {
      response = await caflm.apiFetch('/v1/cluster', { timeoutMs: POLL_TIMEOUT_MS });
      if (!response.ok) return { error: await caflm.errorMessage(response) };
      return { snapshot: await response.json() };
    } catch {
      return { error: null };
    }
  }

  // One poll at a time: the next starts a second after this one started, or
  // at once if this one took longer.
  async function pollForever() {
    for (;;) {
      const started = performance.now();
      const result = await fetchSnapshot();
      if (result.snapshot) {
        showLive();
        render(result.snapshot);
      } else {
        showProblem(result.error);
      }
      await caflm.sleep(Math.max(0, POLL_INTERVAL_MS - (performance.now() - started)));
    }
  }

  // --- events timeline ---------------------------------------------------------

  // Colour of each event kind: losses red, recoveries green, moves amber, 429s grey.
  const EVENT_TONES = {
    engine_lost: 'bad',
    engine_up: 'good',
    engine_back: 'good',
    request_moved: 'move',
    preemption: 'move',
    rate_limited: 'muted',
  };

  let lastEventId = null;

  function addEvent(event) {
    const type = String(event.type ?? 'event');
    const time = typeof event.time === 'number' ? event.time : Date.now() / 1000;
    const item = el('li', { 'data-event-type': type, 'data-tone': EVENT_TONES[type] ?? 'info', 'data-event-id': event.id },
      el('time', { datetime: new Date(time * 1000).toISOString() }, formatClock(time)),
      el('span', { className: 'event-message' }, event.message ?? type));
    timeline.prepend(item);
    while (timeline.children.length > MAX_EVENTS) timeline.lastElementChild.remove();
  }

  function onClusterEvent(sse) {
    if (sse.type !== 'cluster' && sse.type !== 'message') return;
    let event;
    try {
      event = JSON.parse(sse.data);
    } catch {
      return;
    }
    if (event === null || typeof event !== 'object') return;
    event.id ??= sse.id || undefined;
    if (event.id !== undefined) lastEventId = event.id;
    addEvent(event);
  }

  function setEventsState(state, text) {
    eventsState.dataset.state = state;
    eventsState.textContent = text;
  }

  // Reads the event stream once; resolves to 'ended' (it was open and then
  // closed), 'failed' (it could not be opened) or 'needs-key'.
  async function readEventsOnce() {
    const query = lastEventId === null ? '' : `?after=${encodeURIComponent(lastEventId)}`;
    let response;
    try {
      response = await caflm.apiFetch(`/v1/cluster/events${query}`, { headers: { Accept: 'text/event-stream' } });
    } catch {
      return 'failed';
    }
    if (response.status === 401) return 'needs-key';
    if (!response.ok) return 'failed';
    setEventsState('live', 'live');
    try {
      await caflm.readSse(response, onClusterEvent, { idleMs: EVENTS_IDLE_MS });
    } catch {
      // The connection broke: reconnect below like after a clean end.
    }
    return 'ended';
  }

  // Follows the stream for as long as the page is open, reconnecting with
  // exponential backoff and asking only for events not yet shown.
  async function followEvents() {
    let delay = RECONNECT_MIN_MS;
    for (;;) {
      const outcome = await readEventsOnce();
      if (outcome === 'needs-key') {
        setEventsState('offline', 'needs an API key');
        await caflm.nextKeyChange();
        continue;
      }
      if (outcome === 'ended') delay = RECONNECT_MIN_MS;
      setEventsState('reconnecting', `reconnecting in ${Math.round(delay / 1000)} s`);
      await caflm.sleep(delay);
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
    }
  }

  function init() {
    let resizeFrame = 0;
    window.addEventListener('resize', () => {
      cancelAnimationFrame(resizeFrame);
      resizeFrame = requestAnimationFrame(() => lastSnapshot && renderCharts(lastSnapshot));
    });
    pollForever();
    followEvents();
  }

  init();
})();
