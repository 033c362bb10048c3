"use strict";
// The page of `salience serve`: plain DOM, no build step, nothing loaded from elsewhere.

const $ = (id) => document.getElementById(id);

async function call(path, body) {
  const response = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const err = data.error || {};
    throw new Error((err.message || response.statusText) + (err.code ? ` (${err.code})` : ""));
  }
  return data;
}

// Text with the [start, end) code-point spans wrapped in <mark>; offsets count code points, as Python does.
function highlighted(text, spans, wrap = "mark") {
  const chars = Array.from(text || "");
  const out = document.createDocumentFragment();
  let at = 0;
  for (const [start, end] of (spans || []).slice().sort((a, b) => a[0] - b[0])) {
    if (start < at) continue;
    out.append(chars.slice(at, start).join(""));
    const mark = document.createElement(wrap);
    mark.textContent = chars.slice(start, end).join("");
    out.append(mark);
    at = end;
  }
  out.append(chars.slice(at).join(""));
  return out;
}

function parseFilter(text) {
  text = text.trim();
  if (!text) return null;
  if (text.startsWith("{")) return JSON.parse(text);
  const where = {};
  for (const part of text.split(",")) {
    const [field, ...rest] = part.split("=");
    if (!field.trim() || !rest.length) throw new Error(`filter "${part.trim()}": write field=value`);
    const value = rest.join("=").trim();
    where[field.trim()] = /^-?\d+(\.\d+)?$/.test(value) ? Number(value) : value;
  }
  return where;
}

function status(id, message, isError = false) {
  const el = $(id);
  el.textContent = message;
  el.classList.toggle("error", isError);
}

async function loadIndexes() {
  try {
    const { indexes } = await call("/indexes");
    const select = $("index");
    select.replaceChildren(...indexes.map((ix) => new Option(`${ix.name} (${ix.kind}, ${ix.documents} documents)`, ix.name)));
    if (!indexes.length) status("search-status", "This service serves no index: start it with salience serve INDEX_DIR.");
  } catch (err) {
    status("search-status", `Could not list the indexes: ${err.message}`, true);
  }
}

function renderResult(row) {
  const li = document.createElement("li");
  const doc = row.document || {};
  const lights = row.highlights || {};
  const title = document.createElement("div");
  title.className = "title";
  title.append(highlighted(doc.title || row.id, doc.title ? lights.title : []));
  const meta = document.createElement("div");
  meta.className = "meta";
  meta.textContent = `${row.id} · score ${row.score.toFixed(3)}`;
  const snippet = document.createElement("p");
  snippet.className = "snippet";
  snippet.append(highlighted(doc.text || "", lights.text));
  li.append(title, meta, snippet);
  if (row.explanation) {
    const terms = document.createElement("div");
    terms.className = "terms";
    terms.textContent = "matched: " + row.explanation.terms.filter((t) => t.contribution > 0)
      .map((t) => `${t.term} +${t.contribution.toFixed(2)}`).join(", ");
    li.append(terms);
  }
  return li;
}

async function search(event) {
  event.preventDefault();
  const list = $("results");
  let where;
  try { where = parseFilter($("filter").value); } catch (err) { status("search-status", err.message, true); return; }
  status("search-status", "Searching…");
  const started = performance.now();
  try {
    const body = { query: $("query").value, k: Number($("k").value) || 10, explain: $("explain").checked };
    if (where) body.where = where;
    const data = await call(`/indexes/${encodeURIComponent($("index").value)}/search`, body);
    list.replaceChildren(...data.results.map(renderResult));
    const ms = Math.round(performance.now() - started);
    status("search-status", data.results.length ? `${data.results.length} results in ${ms} ms` : "No matching documents.");
  } catch (err) {
    list.replaceChildren();
    status("search-status", err.message, true);
  }
}

async function analyse(event) {
  event.preventDefault();
  const text = $("text").value;
  status("text-status", "Analysing…");
  try {
    const [phrases, summary] = await Promise.all([
      call("/keyphrases", { text, k: Number($("phrases-k").value) || 8 }),
      call("/summary", { text, sentences: Number($("sentences").value) || 3 }),
    ]);
    $("keyphrases").replaceChildren(...phrases.keyphrases.map((p) => {
      const li = document.createElement("li");
      li.textContent = p.phrase;
      return li;
    }));
    $("summary-text").textContent = summary.summary;
    const view = $("sentences-view");
    view.replaceChildren();
    const chars = Array.from(text);
    let at = 0;
    for (const s of summary.sentences) {
      view.append(chars.slice(at, s.start).join(""));
      const span = document.createElement("span");
      span.className = "sentence" + (s.selected ? " chosen" : "");
      span.textContent = chars.slice(s.start, s.end).join("");
      span.title = `salience ${s.score.toFixed(3)}`;
      view.append(span);
      at = s.end;
    }
    view.append(chars.slice(at).join(""));
    $("text-output").hidden = false;
    status("text-status", `${phrases.keyphrases.length} key phrases; ${summary.sentences.filter((s) => s.selected).length} of ${summary.sentences.length} sentences chosen.`);
  } catch (err) {
    $("text-output").hidden = true;
    status("text-status", err.message, true);
  }
}

// A cited passage with the sentences the answer read most marked, best citation first.
function renderCitation(citation) {
  const li = document.createElement("li");
  const meta = document.createElement("div");
  meta.className = "meta";
  meta.textContent = `${citation.id} · attribution ${citation.score.toFixed(3)}`;
  const text = document.createElement("p");
  text.className = "snippet";
  text.append(highlighted(citation.text, citation.sentences.map((s) => [s.start, s.end])));
  li.append(meta, text);
  return li;
}

async function ask(event) {
  event.preventDefault();
  status("answer-status", "Answering…");
  const started = performance.now();
  try {
    const body = { index: $("index").value, question: $("question").value, k: Number($("answer-k").value) || 10,
                   sort: $("answer-sort").checked ? "attention" : null };
    const budget = Number($("answer-budget").value);
    if (budget > 0) body.budget = budget;
    const data = await call("/answer", body);
    $("answer-text").textContent = data.answer;
    $("citations").replaceChildren(...data.citations.map(renderCitation));
    const v = data.verification || {};
    const drops = Object.entries(v.top_k_drop || {}).map(([k, d]) => {
      const random = (v.random_k_drop || {})[k];
      return `top-${k} ${d.toFixed(3)}` + (random === undefined ? "" : ` (random ${random.toFixed(3)})`);
    });
    $("answer-verification").textContent = drops.length ? "Log-probability drop without the cited passages: " + drops.join(", ") : (data.notes || []).join(" ");
    $("answer-output").hidden = false;
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    status("answer-status", `${data.citations.length} cited of ${data.passages.length} passages read, in ${seconds} s (${data.model}).`);
  } catch (err) {
    $("answer-output").hidden = true;
    status("answer-status", err.message, true);
  }
}

async function showAnswerIfServed() {
  try {
    const health = await call("/health");
    const served = Boolean(health.language_model);
    $("answer-section").hidden = !served;
    $("answer-link").hidden = !served;
  } catch (err) { /* the page works without the answer section */ }
}

document.addEventListener("DOMContentLoaded", () => {
  $("search-form").addEventListener("submit", search);
  $("answer-form").addEventListener("submit", ask);
  showAnswerIfServed();
  $("text-form").addEventListener("submit", analyse);
  loadIndexes();
});
