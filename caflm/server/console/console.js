// Shared by the chat and cluster pages of the caflm web console: the API key,
// authorized fetch, a server-sent events reader over fetch, the header and
// small formatting helpers. Loaded as a classic deferred script before the
// page's own script, which reaches everything through the `caflm` object.
'use strict';

const caflm = (() => {
  const KEY_STORAGE = 'caflm.apiKey';

  // --- DOM -----------------------------------------------------------------

  // Builds an element; children are nodes or strings (always text, never
  // HTML, so nothing a server or a model sends can inject markup).
  function el(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (value === null || value === undefined || value === false) continue;
      if (name === 'className') node.className = value;
      else node.setAttribute(name, value === true ? '' : String(value));
    }
    node.append(...children.filter((child) => child !== null && child !== undefined));
    return node;
  }

  function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  // --- formatting ----------------------------------------------------------

  function pad2(n) {
    return String(n).padStart(2, '0');
  }

  // Local wall-clock time as HH:MM:SS, independent of the browser's locale so
  // that what the pages show is predictable.
  function formatClock(unixSeconds) {
    const date = new Date(unixSeconds * 1000);
    return `${pad2(date.getHours())}:${pad2(date.getMinutes())}:${pad2(date.getSeconds())}`;
  }

  // A duration as people read it on a dashboard: "45 s", "3 min 20 s", "2 h 5 min".
  function formatDuration(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }

  // A number with at most `digits` decimals and no trailing zeros; "–" when unknown.
  function formatNumber(value, digits = 1) {
    if (typeof value !== 'number' || !Number.isFinite(value)) return '–';
    return String(Number(value.toFixed(digits)));
  }

  function formatPercent(fraction) {
    if (typeof fraction !== 'number' || !Number.isFinite(fraction)) return '–';
    return `${formatNumber(fraction * 100, 1)} %`;
  }

  // --- API key -------------------------------------------------------------

  function getKey() {
    return sessionStorage.getItem(KEY_STORAGE);
  }

  // After the user cancels the dialog, further 401s fail quietly until a key
  // is set or forgotten; a page polling every second would otherwise reopen
  // the dialog at once.
  let keyDeclined = false;

  function setKey(key) {
    if (key) sessionStorage.setItem(KEY_STORAGE, key);
    else sessionStorage.removeItem(KEY_STORAGE);
    keyDeclined = false;
    updateKeyButton();
    window.dispatchEvent(new CustomEvent('caflm:key-changed'));
  }

  // Resolves when the key is next set or forgotten: what a missing key had
  // refused can then be asked for again.
  function nextKeyChange() {
    return new Promise((resolve) => window.addEventListener('caflm:key-changed', resolve, { once: true }));
  }

  let keyDialog = null;
  // Resolves the promise of the dialog on screen; null while none is.
  let settleKeyDialog = null;
  let keyDialogOutcome = null;

  function buildKeyDialog() {
    const input = el('input', {
      id: 'api-key-input', type: 'password', autocomplete: 'off', spellcheck: 'false', required: true,
    });
    const save = el('button', { id: 'key-save', type: 'submit', value: 'save', className: 'primary' }, 'Use key');
    const cancel = el('button', { id: 'key-cancel', type: 'button' }, 'Cancel');
    const forget = el('button', { id: 'key-forget', type: 'button' }, 'Forget key');
    const form = el('form', { method: 'dialog', id: 'key-form' },
      el('h2', { id: 'key-dialog-title' }, 'API key'),
      el('p', { id: 'key-message' }),
      el('label', { for: 'api-key-input' }, 'Key'),
      input,
      el('p', { className: 'hint' }, 'Kept in this browser tab only (sessionStorage).'),
      el('div', { className: 'dialog-actions' }, forget, el('span', { className: 'spacer' }), cancel, save));
    const dialog = el('dialog', { id: 'key-dialog', className: 'key-dialog', 'aria-labelledby': 'key-dialog-title' }, form);
    form.addEventListener('submit', () => setKey(input.value.trim()));
    cancel.addEventListener('click', () => dialog.close('cancel'));
    forget.addEventListener('click', () => {
      setKey(null);
      dialog.close('forget');
    });
    // Escape closes the dialog with an empty return value: a cancel.
    dialog.addEventListener('close', () => settleKeyDialog?.(dialog.returnValue || 'cancel'));
    document.body.append(dialog);
    return dialog;
  }

  // Shows the key dialog; resolves to 'save' (the key is stored), 'forget'
  // (the key is removed) or 'cancel'. While it is on screen, callers share
  // its outcome.
  function openKeyDialog(message) {
    keyDialog ??= buildKeyDialog();
    if (keyDialog.open) return keyDialogOutcome;
    keyDialog.querySelector('#key-message').textContent = message;
    keyDialog.querySelector('#key-forget').hidden = !getKey();
    const input = keyDialog.querySelector('#api-key-input');
    input.value = getKey() ?? '';
    keyDialog.returnValue = '';
    keyDialogOutcome = new Promise((resolve) => {
      settleKeyDialog = (outcome) => {
        settleKeyDialog = null;
        resolve(outcome);
      };
    });
    keyDialog.showModal();
    input.select();
    return keyDialogOutcome;
  }

  // One dialog answers every request that met a 401 at the same time.
  let pendingKeyRequest = null;

  function askForKey(refusedKey) {
    if (keyDeclined) return Promise.resolve(null);
    const message = refusedKey
      ? 'The server refused this key. Enter the key given to caflm serve with --api-key.'
      : 'This server needs an API key (caflm serve --api-key). Enter it to continue.';
    pendingKeyRequest ??= openKeyDialog(message).then((outcome) => {
      pendingKeyRequest = null;
      keyDeclined = outcome !== 'save';
      return outcome === 'save' ? getKey() : null;
    });
    return pendingKeyRequest;
  }

  function changeKeyFromButton() {
    openKeyDialog(getKey()
      ? 'Change the API key this tab sends, or forget it.'
      : 'Enter the API key the server was started with (--api-key).');
  }

  function updateKeyButton() {
    const button = document.getElementById('key-button');
    if (!button) return;
    button.dataset.hasKey = getKey() ? 'true' : 'false';
    button.title = getKey() ? 'API key set for this tab: change or forget it' : 'Enter an API key';
  }

  // --- HTTP ----------------------------------------------------------------

  function withKey(options, key) {
    const headers = new Headers(options.headers ?? {});
    if (key) headers.set('Authorization', `Bearer ${key}`);
    return { ...options, headers };
  }

  // fetch for /v1 paths: sends the key, and on a 401 asks for one and retries.
  // Resolves to the final response (still a 401 when the user gave no key).
  // timeoutMs bounds each attempt, not the time the user spends in the dialog.
  async function apiFetch(path, { timeoutMs = 0, ...options } = {}) {
    for (;;) {
      const sentKey = getKey();
      const attempt = timeoutMs ? { ...options, signal: AbortSignal.timeout(timeoutMs) } : options;
      const response = await fetch(path, withKey(attempt, sentKey));
      if (response.status !== 401) return response;
      // Another request may have obtained a new key while this one was out.
      if (getKey() && getKey() !== sentKey) continue;
      const key = await askForKey(sentKey);
      if (!key) return response;
    }
  }

  // The human-readable message of an error response (OpenAI-style body).
  async function errorMessage(response) {
    let message = '';
    try {
      const body = await response.json();
      message = body?.error?.message ?? '';
    } catch {
      // Not JSON (a proxy's page, say): fall back to the status line.
    }
    if (!message) message = `HTTP ${response.status} ${response.statusText}`.trim();
    if (response.status === 401) message += ' (use the key button to enter the API key)';
    const retryAfter = response.headers.get('Retry-After');
    if (response.status === 429 && retryAfter) {
      // Retry-After is either seconds or an HTTP date.
      message += /^\d+$/.test(retryAfter) ? ` (retry after ${retryAfter} s)` : ` (retry after ${retryAfter})`;
    }
    return message;
  }

  // --- server-sent events --------------------------------------------------

  // A line-oriented parser for text/event-stream (WHATWG HTML, "Parsing an
  // event stream"); fed text in arbitrary pieces.
  function createSseParser(onEvent) {
    let buffer = '';
    let data = [];
    let type = '';
    let lastId = '';

    function dispatch() {
      if (data.length > 0) onEvent({ type: type || 'message', data: data.join('\n'), id: lastId });
      data = [];
      type = '';
    }

    function processLine(line) {
      if (line === '') return dispatch();
      if (line.startsWith(':')) return undefined;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') data.push(value);
      else if (field === 'event') type = value;
      else if (field === 'id' && !value.includes('\0')) lastId = value;
      return undefined;
    }

    return function push(text) {
      buffer += text;
      let start = 0;
      for (;;) {
        const end = buffer.slice(start).search(/[\r\n]/);
        if (end < 0) break;
        const at = start + end;
        // A CR at the very end may be the first half of a CRLF split across reads.
        if (buffer[at] === '\r' && at === buffer.length - 1) break;
        processLine(buffer.slice(start, at));
        start = at + (buffer[at] === '\r' && buffer[at + 1] === '\n' ? 2 : 1);
      }
      buffer = buffer.slice(start);
    };
  }

  // Reads an event-stream response body to its end, calling onEvent for each
  // event; onEvent returning false stops reading (and closes the stream). With
  // idleMs, a stream silent for that long (no event, no keep-alive comment) is
  // closed as if the server had ended it, so a dead connection gets noticed.
  async function readSse(response, onEvent, { idleMs = 0 } = {}) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let stopped = false;
    const push = createSseParser((event) => {
      if (!stopped && onEvent(event) === false) stopped = true;
    });
    let idleTimer = 0;
    const armIdleTimer = () => {
      if (!idleMs) return;
      clearTimeout(idleTimer);
      idleTimer = setTimeout(() => reader.cancel().catch(() => {}), idleMs);
    };
    try {
      armIdleTimer();
      while (!stopped) {
        const { value, done } = await reader.read();
        if (done) return;
        armIdleTimer();
        push(decoder.decode(value, { stream: true }));
      }
      await reader.cancel();
    } catch (error) {
      reader.cancel().catch(() => {});
      throw error;
    } finally {
      clearTimeout(idleTimer);
    }
  }

  // --- header --------------------------------------------------------------

  let modelName = null;

  // The served model's name (GET /v1/models), shown in the header; null
  // when the server cannot say (the next call asks again).
  async function loadModelName() {
    if (modelName) return modelName;
    try {
      const response = await apiFetch('/v1/models');
      if (response.ok) {
        const body = await response.json();
        showModelName(body?.data?.[0]?.id ?? null);
      }
    } catch {
      // Unreachable: the page shows its own error; the header keeps "…".
    }
    return modelName;
  }

  function showModelName(name) {
    if (!name) return;
    modelName = name;
    const target = document.getElementById('model-name');
    if (target) {
      target.textContent = name;
      target.title = `Served model: ${name}`;
    }
  }

  function initHeader() {
    const button = document.getElementById('key-button');
    button?.addEventListener('click', changeKeyFromButton);
    updateKeyButton();
    window.addEventListener('caflm:key-changed', () => loadModelName());
    loadModelName();
  }

  initHeader();

  // createSseParser is exported for the browser tests, which feed it
  // hand-made streams.
  return {
    el, sleep, formatClock, formatDuration, formatNumber, formatPercent,
    nextKeyChange, apiFetch, errorMessage, readSse, createSseParser,
    loadModelName, showModelName,
  };
})();
