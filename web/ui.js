// nanochat chat UI (upstream's ui.html): streaming from POST /chat/completions, edit a user message,
// regenerate a reply, slash commands, health banner, new conversation, stop button, and the
// calculator tool's python blocks and outputs rendered as blocks. Plain JS, no dependencies.
'use strict';

const API_URL = '';  // same origin as the page
const state = {
  messages: [],         // {role: 'user'|'assistant', content: string (assistant: raw text with tool markers)}
  temperature: 0.8,
  topK: 50,
  maxTokens: 512,
  controller: null,     // AbortController of the stream in progress
};

// the server reuses the KV of earlier requests only within one cache_salt: a random one per
// browser keeps this browser's chats out of everyone else's prefix cache (and theirs out of ours)
function cacheSalt() {
  const name = 'nanochat_cache_salt';
  let salt = null;
  try { salt = localStorage.getItem(name); } catch (e) { /* storage off: one salt per page */ }
  if (!salt || !/^[0-9a-f]{32}$/.test(salt)) {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    salt = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
    try { localStorage.setItem(name, salt); } catch (e) { /* storage off */ }
  }
  return salt;
}
const CACHE_SALT = cacheSalt();

const el = (id) => document.getElementById(id);
const messagesEl = el('messages'), input = el('input'), sendBtn = el('send'), stopBtn = el('stop');
const banner = el('banner');

// ---- tool markers: the model's special tokens arrive as their literal text ----------------------
const MARKERS = {
  '<|python_start|>': ['python', true], '<|python_end|>': ['python', false],
  '<|output_start|>': ['python_output', true], '<|output_end|>': ['python_output', false],
};
const MARKER_RE = /<\|(python_start|python_end|output_start|output_end)\|>/g;

// raw text -> [{type: 'text'|'python'|'python_output', text, open}] (open: block not closed yet)
function parseParts(raw) {
  const parts = [];
  let type = 'text', last = 0, m;
  const push = (text, t, open) => {
    if (text || t !== 'text') parts.push({type: t, text, open});
  };
  MARKER_RE.lastIndex = 0;
  while ((m = MARKER_RE.exec(raw)) !== null) {
    const [kind, starts] = MARKERS[m[0]];
    const text = raw.slice(last, m.index);
    if (starts) {
      push(text, type, false);
      type = kind;
    } else if (type === kind) {
      push(text, type, false);
      type = 'text';
    } else {
      continue;  // a stray end marker stays in the text
    }
    last = m.index + m[0].length;
  }
  push(raw.slice(last), type, type !== 'text');
  return parts.filter((p) => p.type !== 'text' || p.text);
}

// what the server gets back: a string, or parts when the reply used the tool (as render_conversation)
function apiContent(msg) {
  if (msg.role !== 'assistant') return msg.content;
  const parts = parseParts(msg.content);
  if (parts.every((p) => p.type === 'text')) return msg.content;
  return parts.map((p) => ({type: p.type, text: p.text}));
}

// ---- rendering -----------------------------------------------------------------------------------
function renderAssistant(div, raw) {
  div.textContent = '';
  for (const p of parseParts(raw)) {
    if (p.type === 'text') {
      div.appendChild(document.createTextNode(p.text));
      continue;
    }
    const box = document.createElement('div');
    box.className = 'tool ' + (p.type === 'python' ? 'call' : 'output');
    const label = document.createElement('span');
    label.className = 'label';
    label.textContent = p.type === 'python' ? 'python (calculator)' : 'output';
    const pre = document.createElement('pre');
    pre.textContent = p.text + (p.open ? ' …' : '');
    box.append(label, pre);
    div.appendChild(box);
  }
}

function addMessage(role, content, extraClass) {
  el('welcome')?.remove();
  const div = document.createElement('div');
  div.className = 'message ' + role + (extraClass ? ' ' + extraClass : '');
  if (role === 'assistant') renderAssistant(div, content);
  else div.textContent = content;
  messagesEl.appendChild(div);
  scrollDown();
  return div;
}

function consoleMessage(text, isError, extraClass) {
  addMessage('console', text, (isError ? 'error ' : '') + (extraClass || ''));
}

function scrollDown() {
  const main = el('chat');
  main.scrollTop = main.scrollHeight;
}

// redraw the conversation (after edits); index i of state.messages is data-index i
function renderAll() {
  messagesEl.querySelectorAll('.message.user, .message.assistant').forEach((d) => d.remove());
  state.messages.forEach((m, i) => {
    const d = addMessage(m.role, m.content);
    d.dataset.index = i;
  });
}

function updateSettings() {
  el('settings').textContent = `temperature ${state.temperature} · top-k ${state.topK}`;
}

function setBusy(busy) {
  sendBtn.classList.toggle('hidden', busy);
  stopBtn.classList.toggle('hidden', !busy);
}

// ---- the stream --------------------------------------------------------------------------------
async function generate() {
  const div = addMessage('assistant', '', 'streaming');
  div.innerHTML = '<span class="typing">···</span>';
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  let raw = '', stopped = false, failed = null;
  try {
    const res = await fetch(API_URL + '/chat/completions', {
      method: 'POST',
      headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({
        messages: state.messages.map((m) => ({role: m.role, content: apiContent(m)})),
        temperature: state.temperature, top_k: state.topK, max_tokens: state.maxTokens,
        cache_salt: CACHE_SALT,
      }),
      signal: controller.signal,
    });
    if (!res.ok) {
      let detail = res.statusText;
      try { detail = (await res.json()).detail || detail; } catch (e) { /* not JSON */ }
      throw new Error(`${res.status}: ${detail}`);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data: ')) continue;
          const data = JSON.parse(line.slice(6));
          if (data.error) throw new Error(data.error);
          if (data.token !== undefined) {
            raw += data.token;
            renderAssistant(div, raw);
            scrollDown();
          }
        }
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') stopped = true;
    else failed = e.message;
  }
  state.controller = null;
  setBusy(false);
  div.classList.remove('streaming');
  if (failed !== null) {
    div.remove();
    const last = state.messages.pop();  // give the user their message back
    if (!input.value) input.value = last ? last.content : '';
    autoGrow();
    consoleMessage('Error: ' + failed, true);
    return;
  }
  if (!raw) {
    div.remove();
    const last = state.messages.pop();
    if (!input.value) input.value = last ? last.content : '';
    autoGrow();
    consoleMessage(stopped ? 'Stopped before any text; your message is back in the input box.'
                           : 'The model gave an empty reply; your message is back in the input box.');
    return;
  }
  state.messages.push({role: 'assistant', content: raw});
  div.dataset.index = state.messages.length - 1;
  renderAssistant(div, raw);
  if (stopped) {
    const note = document.createElement('span');
    note.className = 'stopped-note';
    note.textContent = '(stopped)';
    div.appendChild(note);
  }
  input.focus();
}

// ---- slash commands ------------------------------------------------------------------------------
const HELP = [
  'Commands:',
  '  /temperature [v]   show or set the temperature (0 to 2)',
  '  /topk [v]          show or set top-k (1 to 200)',
  '  /clear             start a new conversation (also Ctrl+Shift+N)',
  '  /help              this list',
  'Click one of your messages to edit it (the conversation is cut there); click a reply to regenerate it.',
].join('\n');

function command(text) {
  const [name, arg] = text.trim().split(/\s+/);
  if (name === '/help') return consoleMessage(HELP, false, 'help');
  if (name === '/clear') return newConversation();
  if (name === '/temperature' || name === '/topk') {
    const isTemp = name === '/temperature';
    const key = isTemp ? 'temperature' : 'topK';
    if (arg === undefined) return consoleMessage(`${isTemp ? 'temperature' : 'top-k'} is ${state[key]}`);
    const v = Number(arg);
    const ok = isTemp ? (Number.isFinite(v) && v >= 0 && v <= 2) : (Number.isInteger(v) && v >= 1 && v <= 200);
    if (!ok) return consoleMessage(isTemp ? 'temperature must be a number from 0 to 2' : 'top-k must be an integer from 1 to 200', true);
    state[key] = v;
    updateSettings();
    return consoleMessage(`${isTemp ? 'temperature' : 'top-k'} set to ${v}`);
  }
  consoleMessage(`unknown command ${name}; /help lists the commands`, true);
}

// ---- actions -----------------------------------------------------------------------------------
function send() {
  const text = input.value.trim();
  if (!text || state.controller) return;
  input.value = '';
  autoGrow();
  if (text.startsWith('/')) return command(text);
  state.messages.push({role: 'user', content: text});
  addMessage('user', text).dataset.index = state.messages.length - 1;
  generate();
}

function newConversation() {
  if (state.controller) state.controller.abort();
  state.messages = [];
  messagesEl.textContent = '';
  consoleMessage('New conversation.');
  input.value = '';
  autoGrow();
  input.focus();
}

// click a user message: edit it (the conversation is cut there); click a reply: regenerate it
messagesEl.addEventListener('click', (ev) => {
  const div = ev.target.closest('.message.user, .message.assistant');
  if (!div || div.classList.contains('streaming') || state.controller || div.dataset.index === undefined) return;
  const i = Number(div.dataset.index);
  const msg = state.messages[i];
  if (msg.role === 'user') {
    state.messages = state.messages.slice(0, i);
    renderAll();
    input.value = msg.content;
    autoGrow();
    input.focus();
  } else {
    state.messages = state.messages.slice(0, i);
    renderAll();
    generate();
  }
});

function autoGrow() {
  input.style.height = 'auto';
  input.style.height = Math.min(input.scrollHeight, 200) + 'px';
}

input.addEventListener('input', autoGrow);
input.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    send();
  }
});
el('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  send();
});
stopBtn.addEventListener('click', () => state.controller && state.controller.abort());
el('new-chat').addEventListener('click', newConversation);
document.addEventListener('keydown', (ev) => {
  if (ev.ctrlKey && ev.shiftKey && (ev.key === 'N' || ev.key === 'n')) {
    ev.preventDefault();
    newConversation();
  }
});

// ---- health banner: retry while the model loads --------------------------------------------------
async function checkHealth() {
  try {
    const res = await fetch(API_URL + '/health');
    const h = await res.json();
    if (h.ready) {
      banner.classList.add('hidden');
      return;
    }
    banner.className = 'banner';
    banner.textContent = h.status === 'loading' ? 'The model is loading…' : `Server ${h.status}.`;
  } catch (e) {
    banner.className = 'banner error';
    banner.textContent = 'Engine not running… start it with `nanochat chat-web`.';
  }
  setTimeout(checkHealth, 2000);
}

updateSettings();
checkHealth();
input.focus();
