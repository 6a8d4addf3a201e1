// The chat page: a conversation with the served model over
// POST /v1/chat/completions, streamed, with each answer's figures.
'use strict';

(() => {
  const { el } = caflm;

  const messagesEl = document.getElementById('messages');
  const emptyHint = document.getElementById('empty-hint');
  const composer = document.getElementById('composer');
  const promptEl = document.getElementById('prompt');
  const sendButton = document.getElementById('send');
  const stopButton = document.getElementById('stop');
  const clearButton = document.getElementById('clear');
  const settingsPanel = document.getElementById('settings-panel');

  // Each turn: { user, assistant, state } where state is the answer's
  // data-state; only finished answers with text go back to the model.
  let turns = [];
  // The answer being streamed: { controller, turn }; null when idle.
  let active = null;

  // --- settings ------------------------------------------------------------

  function numberSetting(id) {
    const input = document.getElementById(id);
    return input.value.trim() === '' ? null : Number(input.value);
  }

  // The sampling settings, or null (with the browser's hint shown) when one
  // is out of range.
  function readSettings() {
    const inputs = ['temperature', 'top-p', 'max-tokens', 'seed'].map((id) => document.getElementById(id));
    const invalid = inputs.find((input) => !input.checkValidity());
    if (invalid) {
      settingsPanel.open = true;
      invalid.reportValidity();
      return null;
    }
    return {
      system: document.getElementById('system-prompt').value,
      temperature: numberSetting('temperature') ?? 0.7,
      top_p: numberSetting('top-p') ?? 0.95,
      max_tokens: numberSetting('max-tokens') ?? 256,
      seed: numberSetting('seed'),
    };
  }

  function conversation(settings, prompt) {
    const messages = [];
    if (settings.system.trim()) messages.push({ role: 'system', content: settings.system });
    for (const turn of turns) {
      if (!['done', 'stopped'].includes(turn.state) || !turn.assistant) continue;
      messages.push({ role: 'user', content: turn.user }, { role: 'assistant', content: turn.assistant });
    }
    messages.push({ role: 'user', content: prompt });
    return messages;
  }

  function requestBody(model, settings, prompt) {
    const body = {
      model,
      messages: conversation(settings, prompt),
      stream: true,
      stream_options: { include_usage: true },
      temperature: settings.temperature,
      top_p: settings.top_p,
      max_tokens: settings.max_tokens,
    };
    if (settings.seed !== null) body.seed = settings.seed;
    if (!model) delete body.model;
    return body;
  }

  // --- message views -------------------------------------------------------

  // Whether the newest text is in view (the user has not scrolled up to read).
  function atEnd() {
    return messagesEl.scrollHeight - messagesEl.scrollTop - messagesEl.clientHeight < 80;
  }

  // Keeps the newest text in view unless the user scrolled up to read.
  function scrollToEnd(force = false) {
    if (force || atEnd()) messagesEl.scrollTop = messagesEl.scrollHeight;
  }

  function addUserMessage(text) {
    emptyHint.hidden = true;
    const view = el('article', { className: 'message user' },
      el('div', { className: 'role' }, 'You'),
      el('div', { className: 'content' }, text));
    messagesEl.append(view);
    return view;
  }

  function addAssistantMessage() {
    const text = document.createTextNode('');
    const content = el('div', { className: 'content' }, text);
    const view = el('article', { className: 'message assistant', 'data-state': 'streaming', 'aria-busy': 'true' },
      el('div', { className: 'role' }, 'Assistant'), content);
    messagesEl.append(view);
    scrollToEnd(true);
    return { view, text, pending: '', frame: 0 };
  }

  // Streamed text reaches the page once per frame, not once per token: a
  // layout per token makes a long answer at hundreds of tokens a second
  // fall ever further behind the stream (and the Stop button with it).
  function appendText(answer, piece) {
    answer.pending += piece;
    if (!answer.frame) answer.frame = requestAnimationFrame(() => flushText(answer));
  }

  function flushText(answer) {
    cancelAnimationFrame(answer.frame);
    answer.frame = 0;
    if (!answer.pending) return;
    // Measured before the text grows: a frame's text may be many lines.
    const follow = atEnd();
    answer.text.appendData(answer.pending);
    answer.pending = '';
    scrollToEnd(follow);
  }

  function setAnswerState(answer, state) {
    answer.view.dataset.state = state;
    answer.view.removeAttribute('aria-busy');
  }

  function figure(value, label) {
    return el('span', { className: 'figure' }, el('b', {}, value), ` ${label}`);
  }

  function enginesFigure(engines) {
    if (engines.length === 0) return null;
    const failover = engines.length > 1;
    return el('span', {
      className: failover ? 'figure engines failover' : 'figure engines',
      title: failover ? 'The answer moved to another engine when the first one failed' : 'Engine that served the answer',
    }, engines.join(' → '), failover ? el('span', { className: 'tag' }, 'failover') : null);
  }

  // The figures line of a finished answer; values that never arrived (no
  // usage chunk after a stop) are left out, of the text and the attributes.
  function renderFigures(answer, outcome) {
    const usage = outcome.usage;
    const figures = el('div', { className: 'figures' });
    const data = {
      promptTokens: usage?.prompt_tokens,
      completionTokens: usage?.completion_tokens,
      cachedTokens: usage ? (usage.prompt_tokens_details?.cached_tokens ?? 0) : undefined,
      ttftMs: outcome.ttftMs === null ? undefined : Math.round(outcome.ttftMs),
      tokensPerSecond: outcome.tokensPerSecond === null ? undefined : Number(outcome.tokensPerSecond.toFixed(1)),
      finishReason: outcome.finishReason ?? undefined,
      engines: outcome.engines.length ? outcome.engines.join(',') : undefined,
    };
    for (const [name, value] of Object.entries(data)) {
      if (value !== undefined) figures.dataset[name] = String(value);
    }
    if (outcome.stopped) figures.append(el('span', { className: 'figure stopped-mark' }, 'stopped'));
    if (usage) {
      figures.append(figure(data.promptTokens, 'prompt'), figure(data.completionTokens, 'completion'),
        figure(data.cachedTokens, 'cached'));
    }
    if (data.ttftMs !== undefined) figures.append(figure(`${data.ttftMs} ms`, 'to first token'));
    if (data.tokensPerSecond !== undefined) figures.append(figure(caflm.formatNumber(data.tokensPerSecond), 'tokens/s'));
    if (data.finishReason) {
      figures.append(el('span', {
        className: `figure finish finish-${data.finishReason}`,
        title: data.finishReason === 'length' ? 'The answer reached max tokens' : 'Why the answer ended',
      }, 'finish ', el('b', {}, data.finishReason)));
    }
    const engines = enginesFigure(outcome.engines);
    if (engines) figures.append(engines);
    answer.view.append(figures);
  }

  function showError(answer, message) {
    answer.view.append(el('div', { className: 'error', role: 'alert' }, message));
  }

  // --- streaming -----------------------------------------------------------

  class AnswerError extends Error {}

  // What one streamed answer produced, and when.
  function newOutcome(sentAt) {
    return {
      sentAt, firstAt: null, endAt: null, text: '', finishReason: null, engines: [], usage: null,
      stopped: false, ttftMs: null, tokensPerSecond: null,
    };
  }

  function applyChunk(chunk, outcome, answer) {
    if (chunk.error) throw new AnswerError(chunk.error.message ?? 'The server reported an error.');
    if (chunk.usage) outcome.usage = chunk.usage;
    const choice = chunk.choices?.[0];
    if (!choice) return;
    const piece = choice.delta?.content;
    if (piece) {
      outcome.firstAt ??= performance.now();
      outcome.text += piece;
      appendText(answer, piece);
    }
    if (choice.finish_reason) {
      outcome.finishReason = choice.finish_reason;
      outcome.endAt = performance.now();
    }
    if (Array.isArray(choice.engines)) outcome.engines = choice.engines.map(String);
  }

  function parseChunk(data) {
    try {
      return JSON.parse(data);
    } catch {
      throw new AnswerError('The server sent an event that is not JSON.');
    }
  }

  async function streamAnswer(body, answer, outcome, signal) {
    const response = await caflm.apiFetch('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
      body: JSON.stringify(body),
      signal,
    });
    if (!response.ok) throw new AnswerError(await caflm.errorMessage(response));
    await caflm.readSse(response, (event) => {
      if (event.data === '[DONE]') return false;
      applyChunk(parseChunk(event.data), outcome, answer);
      return true;
    });
  }

  // TTFT runs from send to the first content; speed is completion tokens
  // over the time from the first token to the end.
  function computeTimings(outcome) {
    outcome.endAt ??= performance.now();
    if (outcome.firstAt !== null) outcome.ttftMs = outcome.firstAt - outcome.sentAt;
    const tokens = outcome.usage?.completion_tokens;
    const seconds = outcome.firstAt === null ? 0 : (outcome.endAt - outcome.firstAt) / 1000;
    if (typeof tokens === 'number') outcome.tokensPerSecond = seconds > 0 ? tokens / seconds : 0;
  }

  function setStreaming(streaming) {
    sendButton.disabled = streaming;
    stopButton.disabled = !streaming;
  }

  async function send() {
    const prompt = promptEl.value;
    if (active || !prompt.trim()) return;
    const settings = readSettings();
    if (!settings) return;
    promptEl.value = '';
    fitPrompt();

    const turn = { user: prompt, assistant: '', state: 'streaming' };
    const controller = new AbortController();
    active = { controller, turn };
    setStreaming(true);
    addUserMessage(prompt);
    const answer = addAssistantMessage();
    const body = requestBody(await caflm.loadModelName(), settings, prompt);
    const outcome = newOutcome(performance.now());
    turns.push(turn);

    try {
      await streamAnswer(body, answer, outcome, controller.signal);
      turn.state = 'done';
    } catch (error) {
      turn.state = controller.signal.aborted ? 'stopped' : 'error';
      if (turn.state === 'error') {
        showError(answer, error instanceof AnswerError ? error.message : `Could not reach the server: ${error.message}`);
      }
    }
    flushText(answer);
    const follow = atEnd();
    turn.assistant = outcome.text;
    outcome.stopped = turn.state === 'stopped';
    computeTimings(outcome);
    if (turn.state !== 'error') renderFigures(answer, outcome);
    setAnswerState(answer, turn.state);
    scrollToEnd(follow);
    if (active?.turn === turn) {
      active = null;
      setStreaming(false);
    }
  }

  function stop() {
    active?.controller.abort();
  }

  function clearConversation() {
    stop();
    active = null;
    setStreaming(false);
    turns = [];
    messagesEl.querySelectorAll('.message').forEach((node) => node.remove());
    emptyHint.hidden = false;
    promptEl.focus();
  }

  // --- composer ------------------------------------------------------------

  // The prompt grows with its text up to a limit set in CSS (max-height).
  function fitPrompt() {
    promptEl.style.height = 'auto';
    promptEl.style.height = `${promptEl.scrollHeight + 2}px`;
  }

  function onPromptKey(event) {
    if (event.key !== 'Enter' || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    send();
  }

  function init() {
    composer.addEventListener('submit', (event) => {
      event.preventDefault();
      send();
    });
    promptEl.addEventListener('keydown', onPromptKey);
    promptEl.addEventListener('input', fitPrompt);
    stopButton.addEventListener('click', stop);
    clearButton.addEventListener('click', clearConversation);
    // Open beside the conversation on wide screens, folded away on phones.
    settingsPanel.open = window.matchMedia('(min-width: 900px)').matches;
    promptEl.focus();
  }

  init();
})();
