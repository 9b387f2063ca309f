// The discovery ranking of codemode-protocol (protocol/src/discovery/index.rs and
// text.rs), written again rule for rule: the same catalog and query give the same
// answer, byte for byte. Usage: node search.js CATALOG.json QUERIES.json, printing one
// JSON answer per query, one per line. No dependencies.
'use strict';

const fs = require('fs');

const STOP_WORDS = new Set([
  'a', 'about', 'an', 'and', 'any', 'are', 'as', 'at', 'be', 'by', 'can', 'could', 'do', 'does', 'for',
  'from', 'has', 'have', 'how', 'i', 'if', 'in', 'into', 'is', 'it', 'its', 'let', 'me', 'my', 'need',
  'of', 'on', 'or', 'our', 'please', 'should', 'so', 'some', 'than', 'that', 'the', 'their', 'them',
  'then', 'there', 'these', 'this', 'those', 'to', 'via', 'want', 'was', 'we', 'what', 'when', 'where',
  'which', 'who', 'will', 'with', 'would', 'you', 'your',
]);

const SYNONYMS = [
  ['add', 'create', 'make', 'new', 'open', 'start', 'append', 'write'],
  ['approval', 'approve', 'accept'],
  ['bug', 'defect', 'issue'],
  ['cancel', 'stop', 'abort', 'end', 'terminate'],
  ['change', 'update', 'edit', 'modify', 'set', 'alter'],
  ['combine', 'merge', 'dedupe', 'duplicate'],
  ['contact', 'person', 'people', 'customer'],
  ['delete', 'remove', 'drop', 'destroy', 'erase', 'trash'],
  ['directory', 'dir', 'folder'],
  ['doc', 'document', 'page'],
  ['email', 'mail', 'inbox', 'mailbox'],
  ['emoji', 'reaction', 'react'],
  ['find', 'search', 'lookup', 'look', 'query'],
  ['get', 'fetch', 'read', 'retrieve', 'show', 'view', 'see'],
  ['holiday', 'vacation', 'away', 'leave'],
  ['list', 'all', 'every', 'enumerate', 'browse'],
  ['log', 'output', 'print', 'stdout'],
  ['money', 'payment', 'charge', 'refund', 'pay'],
  ['mute', 'silence', 'snooze', 'quiet'],
  ['phone', 'sms', 'text', 'mobile'],
  ['post', 'send', 'deliver', 'publish'],
  ['quota', 'space', 'storage', 'capacity'],
  ['recurring', 'subscription', 'billing', 'plan'],
  ['reply', 'respond', 'answer'],
  ['repo', 'repository', 'project'],
  ['restart', 'reboot', 'bounce', 'redeploy'],
  ['rollback', 'revert', 'undo', 'roll'],
  ['sheet', 'spreadsheet'],
  ['slow', 'slowest', 'top', 'expensive'],
  ['user', 'member', 'account', 'people'],
];

const FIELDS = [2.5, 3.0, 2.0, 0.8, 0.4, 0.3];
const K1 = 1.2;
const B = 0.5;
const TYPO_WEIGHT = 0.8;
const SYNONYM_WEIGHT = 0.5;
const DEFAULT_LIMIT = 8;
const MAX_LIMIT = 50;
const LN_2 = 0.6931471805599453;

const isUpper = (c) => c >= 'A' && c <= 'Z';
const isLower = (c) => c >= 'a' && c <= 'z';
const isDigit = (c) => c >= '0' && c <= '9';

function humps(word) {
  const parts = [];
  let start = 0;
  for (let i = 1; i < word.length; i++) {
    const before = word[i - 1];
    const here = word[i];
    const nextLower = i + 1 < word.length && isLower(word[i + 1]);
    if (isUpper(here) && (isLower(before) || isDigit(before) || (isUpper(before) && nextLower))) {
      parts.push(word.slice(start, i));
      start = i;
    }
  }
  parts.push(word.slice(start));
  return parts;
}

function fold(t) {
  const n = t.length;
  if (n > 4 && t.endsWith('ies')) return t.slice(0, n - 3) + 'y';
  if (t.endsWith('sses') || t.endsWith('xes') || t.endsWith('ches') || t.endsWith('shes')) return t.slice(0, n - 2);
  if (t.endsWith('ss') || t.endsWith('us') || t.endsWith('is')) return t;
  if (n >= 3 && t.endsWith('s')) return t.slice(0, n - 1);
  return t;
}

function tokens(text) {
  const out = [];
  for (const word of text.split(/[^A-Za-z0-9]+/)) {
    if (!word) continue;
    for (const part of humps(word)) {
      const lower = part.toLowerCase();
      if (lower.length < 2 || STOP_WORDS.has(lower)) continue;
      out.push(fold(lower));
    }
  }
  return out;
}

function oneEdit(a, b) {
  let p = 0;
  while (p < a.length && p < b.length && a[p] === b[p]) p++;
  a = a.slice(p);
  b = b.slice(p);
  const d = a.length - b.length;
  if (d === 0) {
    if (a.length === 0) return false;
    return a.slice(1) === b.slice(1) || (a.length >= 2 && a[0] === b[1] && a[1] === b[0] && a.slice(2) === b.slice(2));
  }
  if (d === 1) return a.slice(1) === b;
  if (d === -1) return a === b.slice(1);
  return false;
}

function ln(x) {
  let m = x;
  let e = 0;
  while (m >= 2.0) { m /= 2.0; e += 1; }
  while (m < 1.0) { m *= 2.0; e -= 1; }
  const z = (m - 1.0) / (m + 1.0);
  const z2 = z * z;
  let term = z;
  let sum = 0.0;
  for (let k = 0; k < 24; k++) { sum += term / (2 * k + 1); term *= z2; }
  return 2.0 * sum + e * LN_2;
}

const isSpace = (c) => c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f' || c === '\v';

function firstSentence(text) {
  let end = text.length;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '.' && (i + 1 === text.length || isSpace(text[i + 1]))) { end = i + 1; break; }
  }
  let s = text.slice(0, end);
  let a = 0;
  let b = s.length;
  while (a < b && isSpace(s[a])) a++;
  while (b > a && isSpace(s[b - 1])) b--;
  s = s.slice(a, b);
  const chars = Array.from(s);
  return chars.length <= 200 ? s : chars.slice(0, 199).join('') + '\u2026';
}

function sandboxName(name) {
  const ident = (c) => /[A-Za-z0-9_$]/.test(c);
  const digit = /^[0-9]/.test(name);
  const reserved = name === 'then';
  if (name && !digit && !reserved && Array.from(name).every(ident)) return name;
  let s = (!name || digit ? '_' : '') + Array.from(name).map((c) => (ident(c) ? c : '_')).join('');
  return reserved ? s + '_' : s;
}

function buildIndex(catalog) {
  const docs = [];
  const postings = new Map();
  const lengths = [];
  for (const provider of catalog.providers) {
    const pname = tokens(provider.name);
    const pdesc = tokens(provider.description || '');
    for (const tool of provider.tools || []) {
      const names = [];
      const descs = [];
      const props = tool.inputSchema && tool.inputSchema.properties;
      if (props && typeof props === 'object' && !Array.isArray(props)) {
        for (const [key, schema] of Object.entries(props)) {
          names.push(...tokens(key));
          if (schema && typeof schema.description === 'string') descs.push(...tokens(schema.description));
        }
      }
      const fields = [tokens(sandboxName(tool.name)), pname, tokens(tool.description || ''), names, descs, pdesc];
      const doc = docs.length;
      const counts = new Map();
      fields.forEach((list, f) => {
        for (const t of list) {
          if (!counts.has(t)) counts.set(t, [0, 0, 0, 0, 0, 0]);
          counts.get(t)[f] += 1;
        }
      });
      for (const [t, c] of counts) {
        if (!postings.has(t)) postings.set(t, []);
        postings.get(t).push({ doc, counts: c });
      }
      lengths.push(fields.map((l) => l.length));
      docs.push({ provider: provider.name, tool, path: provider.name + '.' + sandboxName(tool.name), norms: [] });
    }
  }
  const n = docs.length;
  for (let f = 0; f < FIELDS.length; f++) {
    let total = 0;
    for (const l of lengths) total += l[f];
    const avg = total / n;
    docs.forEach((doc, i) => { doc.norms[f] = avg > 0 ? (1.0 - B) + B * (lengths[i][f] / avg) : 1.0; });
  }
  const vocabulary = [...postings.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return { catalog, docs, postings, vocabulary };
}

function concepts(index, query) {
  const seen = new Set();
  const out = [];
  for (const token of tokens(query)) {
    if (seen.has(token)) continue;
    seen.add(token);
    const alts = [];
    if (index.postings.has(token) || token.length < 6) {
      alts.push([token, 1.0]);
    } else {
      for (const key of index.vocabulary) {
        if (key.length >= 5 && Math.abs(key.length - token.length) <= 1 && oneEdit(token, key)) alts.push([key, TYPO_WEIGHT]);
      }
    }
    // Synonyms of the token's own alternatives only, never of a synonym.
    const direct = alts.length;
    for (let i = 0; i < direct; i++) {
      const [term, weight] = alts[i];
      for (const group of SYNONYMS) {
        if (!group.includes(term)) continue;
        for (const s of group) {
          if (s !== term && !alts.some(([t]) => t === s)) alts.push([s, weight * SYNONYM_WEIGHT]);
        }
      }
    }
    out.push(alts);
  }
  return out;
}

function rank(index, query, provider) {
  const inScope = (d) => provider === undefined || index.docs[d].provider === provider;
  const cs = concepts(index, query);
  if (cs.length === 0) return index.docs.map((_, d) => [0, d]).filter(([, d]) => inScope(d));
  const n = index.docs.length;
  const scores = new Float64Array(n);
  const best = new Float64Array(n);
  const matched = new Uint32Array(n);
  for (const alts of cs) {
    const touched = [];
    for (const [term, weight] of alts) {
      const postings = index.postings.get(term);
      if (!postings) continue;
      const df = postings.length;
      const idf = ln(1.0 + (n - df + 0.5) / (df + 0.5));
      for (const { doc, counts } of postings) {
        const norms = index.docs[doc].norms;
        let tf = 0.0;
        for (let f = 0; f < FIELDS.length; f++) if (counts[f] > 0) tf += (FIELDS[f] * counts[f]) / norms[f];
        const score = weight * idf * (tf * (K1 + 1.0)) / (tf + K1);
        if (best[doc] === 0.0) touched.push(doc);
        if (score > best[doc]) best[doc] = score;
      }
    }
    for (const doc of touched) { scores[doc] += best[doc]; best[doc] = 0.0; matched[doc] += 1; }
  }
  const total = cs.length;
  const out = [];
  for (let d = 0; d < n; d++) {
    if (scores[d] > 0.0 && inScope(d)) out.push([Math.round(scores[d] * (matched[d] / total) * 10000.0), d]);
  }
  return out;
}

function search(index, request) {
  const providers = index.catalog.providers.map((p) => p.name);
  if (request.provider !== undefined && !providers.includes(request.provider)) {
    throw new Error(`No provider "${request.provider}" in the catalog. Its providers are: ${[...providers].sort().join(', ')}.`);
  }
  const asked = request.limit === undefined ? DEFAULT_LIMIT : request.limit;
  const limit = Math.min(asked, MAX_LIMIT);
  const offset = request.offset === undefined ? 0 : request.offset;
  const ranked = rank(index, request.query, request.provider);
  const path = (d) => index.docs[d].path;
  ranked.sort((a, b) => b[0] - a[0] || (path(a[1]) < path(b[1]) ? -1 : path(a[1]) > path(b[1]) ? 1 : a[1] - b[1]));
  const hits = ranked.slice(offset, offset + limit).map(([key, d]) => {
    const tool = index.docs[d].tool;
    const destructive = !!(tool.annotations && tool.annotations.destructiveHint === true);
    return {
      path: path(d),
      description: firstSentence(tool.description || ''),
      needsApproval: tool.needsApproval === true || destructive,
      destructive,
      score: key / 10000,
    };
  });
  const answer = { query: request.query };
  if (request.provider !== undefined) answer.provider = request.provider;
  Object.assign(answer, { tools: index.docs.length, matches: ranked.length, offset, limit });
  if (asked > MAX_LIMIT) answer.note = `The limit ${asked} is over the most one search answers; this answer holds at most ${MAX_LIMIT} hits.`;
  answer.hits = hits;
  return answer;
}

module.exports = { tokens, fold, oneEdit, ln, firstSentence, buildIndex, search };

if (require.main === module) {
  const [catalogPath, queriesPath] = process.argv.slice(2);
  const index = buildIndex(JSON.parse(fs.readFileSync(catalogPath, 'utf8')));
  const queries = JSON.parse(fs.readFileSync(queriesPath, 'utf8')).queries;
  let out = '';
  for (const q of queries) out += JSON.stringify(search(index, { query: q.query })) + '\n';
  process.stdout.write(out);
}
