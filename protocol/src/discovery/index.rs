//! The search index and its ranking, pinned so another implementation reproduces it to
//! the byte (`conformance/peers/node/search.js` does).
//!
//! Each tool is a document of six fields, each with a weight ([`FIELDS`]): its sandbox
//! name, its provider's name, its description, its parameters' names, their descriptions,
//! and its provider's description. Text becomes tokens by [`text::tokens`].
//!
//! A query's terms are its tokens, each once, in order. A term the catalog lacks, of 6
//! letters or more, stands for every catalog token of 5 letters or more one edit away
//! ([`text::one_edit`]), in sorted order, at weight [`TYPO_WEIGHT`]; terms already taken
//! are skipped. Each term adds to every tool holding it (BM25F, `k1` = [`K1`], `b` = [`B`]):
//!
//! ```text
//! norm_f  = (1 - B) + B * (len_f / avg_f)              (1 where avg_f is 0)
//! tf      = Σ over fields in order: (weight_f * count_f) / norm_f
//! idf     = ln(1 + (N - df + 0.5) / (df + 0.5))        (text::ln; N tools, df holding it)
//! score  += w * idf * (tf * (K1 + 1)) / (tf + K1)      (w: 1, or TYPO_WEIGHT)
//! ```
//!
//! in exactly that order of operations, terms in query order. A tool matches when its
//! score is above 0; its score is `round(score * 10000) / 10000`, and hits are ordered by
//! that rounded score, highest first, then by path, then by catalog position. A query
//! without terms matches every tool (of the provider asked), at score 0, by path.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize, Serializer};

use super::text;
use super::{Catalog, CatalogTool, path};
use crate::texts;

/// The fields of a tool's document and their weights, in the order scores add them.
pub const FIELDS: [(&str, f64); 6] = [
    ("name", 2.5),
    ("provider", 3.0),
    ("description", 2.0),
    ("parameterNames", 0.8),
    ("parameterDescriptions", 0.4),
    ("providerDescription", 0.3),
];

/// BM25's saturation.
pub const K1: f64 = 1.2;
/// BM25's length normalization.
pub const B: f64 = 0.5;
/// The weight of a term standing for a one-letter typo.
pub const TYPO_WEIGHT: f64 = 0.8;
/// The weight of a synonym ([`text::SYNONYMS`]) against the term it stands beside.
pub const SYNONYM_WEIGHT: f64 = 0.5;
/// Hits one answer holds unless asked otherwise.
pub const DEFAULT_LIMIT: usize = 8;
/// The most hits one answer holds; a larger `limit` is clamped and the answer says so.
pub const MAX_LIMIT: usize = 50;

const F: usize = FIELDS.len();

/// One tool holding a term: its document and how often each field holds it.
#[derive(Clone, Debug)]
struct Posting {
    doc: u32,
    counts: [u16; F],
}

/// One tool's document.
#[derive(Clone, Debug)]
pub(super) struct Doc {
    pub(super) provider: usize,
    pub(super) tool: usize,
    pub(super) path: String,
    norms: [f64; F],
}

/// A catalog ready to search and describe. Built once ([`CatalogIndex::new`]); searching
/// reads it only, so one index serves any number of searches at once.
#[derive(Clone, Debug)]
pub struct CatalogIndex {
    pub(super) catalog: Catalog,
    pub(super) docs: Vec<Doc>,
    /// Every token with the tools holding it; sorted, so typo expansion is in order.
    postings: BTreeMap<String, Vec<Posting>>,
    /// Paths (by sandbox name and by the tool's own name) to documents.
    pub(super) by_path: HashMap<String, usize>,
}

/// What a search asks: `{query, provider?, limit?, offset?}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchRequest {
    /// Plain words for what the tool does, such as "open a pull request".
    #[serde(default)]
    pub query: String,
    /// Search only this provider's tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// How many hits to answer: default 8, at most 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// How many of the best hits to skip, to page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<usize>,
}

impl SearchRequest {
    /// A search for `query`, default limit, no offset.
    pub fn new(query: impl Into<String>) -> SearchRequest {
        SearchRequest { query: query.into(), ..SearchRequest::default() }
    }
}

/// A search's answer. Its JSON is pinned: field order as declared here, `provider` and
/// `note` only when present.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchAnswer {
    /// The query as asked.
    pub query: String,
    /// The provider searched, when one was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// How many tools the catalog holds.
    pub tools: usize,
    /// How many tools match.
    pub matches: usize,
    /// How many of the best hits were skipped.
    pub offset: usize,
    /// The most hits this answer holds (clamped to [`MAX_LIMIT`]).
    pub limit: usize,
    /// What was changed in the request ([`texts::SEARCH_LIMIT_CLAMPED`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The hits, best first.
    pub hits: Vec<Hit>,
}

/// One tool a search found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    /// `provider.tool`, as the program calls it.
    pub path: String,
    /// The first sentence of its description, at most 200 characters.
    pub description: String,
    /// Whether a call waits for approval ([`CatalogTool::needs_approval`]).
    pub needs_approval: bool,
    /// Whether its annotations say it is destructive.
    pub destructive: bool,
    /// Its score, rounded to 4 decimals; a whole number is written without a fraction.
    #[serde(serialize_with = "score")]
    pub score: f64,
}

/// A score as JSON: a whole number as an integer, any other as the shortest decimal.
fn score<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        return serializer.serialize_i64(*value as i64);
    }
    serializer.serialize_f64(*value)
}

/// A search that cannot be answered; its Display is the pinned text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SearchError {
    /// The provider asked is not in the catalog ([`texts::SEARCH_UNKNOWN_PROVIDER`]).
    UnknownProvider(String),
}

impl std::fmt::Display for SearchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SearchError::UnknownProvider(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for SearchError {}

impl CatalogIndex {
    /// Index `catalog`: every tool's fields as tokens, the postings, the paths.
    pub fn new(catalog: Catalog) -> CatalogIndex {
        let mut docs = Vec::with_capacity(catalog.tool_count());
        let mut counts: Vec<BTreeMap<String, [u16; F]>> = Vec::with_capacity(docs.capacity());
        let mut lengths: Vec<[usize; F]> = Vec::with_capacity(docs.capacity());
        let mut by_path = HashMap::new();
        for (p, provider) in catalog.providers.iter().enumerate() {
            let provider_fields = [text::tokens(&provider.name), text::tokens(&provider.description)];
            for (t, tool) in provider.tools.iter().enumerate() {
                let fields = tool_fields(tool, &provider_fields);
                let (doc_counts, doc_lengths) = count(&fields);
                let path = path(&provider.name, &tool.name);
                by_path.entry(path.clone()).or_insert(docs.len());
                by_path.entry(format!("{}.{}", provider.name, tool.name)).or_insert(docs.len());
                docs.push(Doc { provider: p, tool: t, path, norms: [1.0; F] });
                counts.push(doc_counts);
                lengths.push(doc_lengths);
            }
        }
        set_norms(&mut docs, &lengths);
        let mut postings: BTreeMap<String, Vec<Posting>> = BTreeMap::new();
        for (doc, terms) in counts.into_iter().enumerate() {
            for (term, counts) in terms {
                postings.entry(term).or_default().push(Posting { doc: doc as u32, counts });
            }
        }
        CatalogIndex { catalog, docs, postings, by_path }
    }

    /// The catalog indexed.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Search the catalog ([`SearchRequest`]); the answer's ranking is this module's.
    pub fn search(&self, request: &SearchRequest) -> Result<SearchAnswer, SearchError> {
        let provider = match &request.provider {
            None => None,
            Some(name) => Some(self.provider_index(name)?),
        };
        let asked = request.limit.unwrap_or(DEFAULT_LIMIT);
        let limit = asked.min(MAX_LIMIT);
        let note = (asked > MAX_LIMIT)
            .then(|| texts::SEARCH_LIMIT_CLAMPED.fill(&[&asked.to_string(), &MAX_LIMIT.to_string()]));
        let mut ranked = self.rank(&request.query, provider);
        let offset = request.offset.unwrap_or(0);
        let matches = ranked.len();
        let end = offset.saturating_add(limit).min(matches);
        if end < matches {
            ranked.select_nth_unstable_by(end, |a, b| self.order(a, b));
            ranked.truncate(end);
        }
        ranked.sort_unstable_by(|a, b| self.order(a, b));
        let hits = ranked
            .get(offset.min(ranked.len())..)
            .unwrap_or_default()
            .iter()
            .map(|&(key, doc)| self.hit(doc, key))
            .collect();
        Ok(SearchAnswer {
            query: request.query.clone(),
            provider: request.provider.clone(),
            tools: self.docs.len(),
            matches,
            offset,
            limit,
            note,
            hits,
        })
    }

    /// The provider named `name`, or the pinned refusal naming every provider.
    fn provider_index(&self, name: &str) -> Result<usize, SearchError> {
        if let Some(found) = self.catalog.providers.iter().position(|p| p.name == name) {
            return Ok(found);
        }
        let mut names: Vec<&str> = self.catalog.providers.iter().map(|p| p.name.as_str()).collect();
        names.sort_unstable();
        Err(SearchError::UnknownProvider(texts::SEARCH_UNKNOWN_PROVIDER.fill(&[name, &names.join(", ")])))
    }

    /// Hits before paging: `(rounded score * 10000, doc)` of every matching tool.
    fn rank(&self, query: &str, provider: Option<usize>) -> Vec<(i64, usize)> {
        let in_scope = |doc: usize| provider.is_none_or(|p| self.docs[doc].provider == p);
        let concepts = self.concepts(query);
        if concepts.is_empty() {
            return (0..self.docs.len()).filter(|&d| in_scope(d)).map(|d| (0, d)).collect();
        }
        let mut scores = vec![0.0f64; self.docs.len()];
        let mut best = vec![0.0f64; self.docs.len()];
        let mut touched = Vec::new();
        let mut matched = vec![0u32; self.docs.len()];
        for alternatives in &concepts {
            for (term, weight) in alternatives {
                let Some(postings) = self.postings.get(term) else { continue };
                self.best_of_term(&mut best, &mut touched, postings, *weight);
            }
            for doc in touched.drain(..) {
                scores[doc] += best[doc];
                best[doc] = 0.0;
                matched[doc] += 1;
            }
        }
        let total = concepts.len() as f64;
        scores
            .iter()
            .enumerate()
            .filter(|&(doc, &s)| s > 0.0 && in_scope(doc))
            .map(|(doc, &s)| (rounded(s * (f64::from(matched[doc]) / total)), doc))
            .collect()
    }

    /// One term's weighted BM25F part for every tool holding it, kept where it is the
    /// best of its concept so far (`touched` lists each tool once).
    fn best_of_term(&self, best: &mut [f64], touched: &mut Vec<usize>, postings: &[Posting], weight: f64) {
        let (n, df) = (self.docs.len() as f64, postings.len() as f64);
        let idf = text::ln(1.0 + (n - df + 0.5) / (df + 0.5));
        for posting in postings {
            let doc = posting.doc as usize;
            let norms = &self.docs[doc].norms;
            let mut tf = 0.0;
            for f in 0..F {
                if posting.counts[f] > 0 {
                    tf += (FIELDS[f].1 * f64::from(posting.counts[f])) / norms[f];
                }
            }
            let score = weight * idf * (tf * (K1 + 1.0)) / (tf + K1);
            if best[doc] == 0.0 {
                touched.push(doc);
            }
            if score > best[doc] {
                best[doc] = score;
            }
        }
    }

    /// A query's concepts, as the module says: per new token, its alternatives with their
    /// weights (the token, or its typo stand-ins; then their synonyms).
    fn concepts(&self, query: &str) -> Vec<Vec<(String, f64)>> {
        let mut seen: Vec<String> = Vec::new();
        let mut concepts = Vec::new();
        for token in text::tokens(query) {
            if seen.contains(&token) {
                continue;
            }
            seen.push(token.clone());
            let mut alternatives: Vec<(String, f64)> = Vec::new();
            if self.postings.contains_key(&token) || token.len() < 6 {
                alternatives.push((token, 1.0));
            } else {
                let near =
                    self.postings.keys().filter(|k| k.len() >= 5 && k.len().abs_diff(token.len()) <= 1);
                for key in near.filter(|k| text::one_edit(&token, k)) {
                    alternatives.push((key.clone(), TYPO_WEIGHT));
                }
            }
            for i in 0..alternatives.len() {
                let (term, weight) = alternatives[i].clone();
                for group in text::SYNONYMS.iter().filter(|g| g.contains(&term.as_str())) {
                    for synonym in group.iter().filter(|s| **s != term) {
                        push_new(&mut alternatives, (*synonym).to_owned(), weight * SYNONYM_WEIGHT);
                    }
                }
            }
            concepts.push(alternatives);
        }
        concepts
    }

    /// Best first: higher rounded score, then path, then catalog position.
    fn order(&self, a: &(i64, usize), b: &(i64, usize)) -> std::cmp::Ordering {
        b.0.cmp(&a.0).then_with(|| self.docs[a.1].path.cmp(&self.docs[b.1].path)).then(a.1.cmp(&b.1))
    }

    /// The hit of document `doc` at rounded score `key`.
    fn hit(&self, doc: usize, key: i64) -> Hit {
        let tool = self.tool(doc);
        let score = key as f64 / 10000.0;
        Hit {
            path: self.docs[doc].path.clone(),
            description: text::first_sentence(&tool.description),
            needs_approval: tool.needs_approval(),
            destructive: tool.destructive(),
            score,
        }
    }

    /// The tool of document `doc`.
    pub(super) fn tool(&self, doc: usize) -> &CatalogTool {
        let d = &self.docs[doc];
        &self.catalog.providers[d.provider].tools[d.tool]
    }
}

/// `score * 10000`, rounded half away from zero (as `Math.round` does for positives).
fn rounded(score: f64) -> i64 {
    (score * 10000.0).round() as i64
}

/// `term` at `weight` unless the query has it already.
fn push_new(terms: &mut Vec<(String, f64)>, term: String, weight: f64) {
    if !terms.iter().any(|(t, _)| *t == term) {
        terms.push((term, weight));
    }
}

/// The tokens of a tool's six fields ([`FIELDS`]).
fn tool_fields(tool: &CatalogTool, provider: &[Vec<String>; 2]) -> [Vec<String>; F] {
    let mut names = Vec::new();
    let mut descriptions = Vec::new();
    let properties = tool.input_schema.as_ref().and_then(|s| s.get("properties")).and_then(|p| p.as_object());
    for (name, schema) in properties.into_iter().flatten() {
        names.extend(text::tokens(name));
        if let Some(description) = schema.get("description").and_then(|d| d.as_str()) {
            descriptions.extend(text::tokens(description));
        }
    }
    [
        text::tokens(&super::sandbox_name(&tool.name)),
        provider[0].clone(),
        text::tokens(&tool.description),
        names,
        descriptions,
        provider[1].clone(),
    ]
}

/// Per term, its count in each field; and each field's length in tokens.
fn count(fields: &[Vec<String>; F]) -> (BTreeMap<String, [u16; F]>, [usize; F]) {
    let mut counts: BTreeMap<String, [u16; F]> = BTreeMap::new();
    let mut lengths = [0; F];
    for (f, tokens) in fields.iter().enumerate() {
        lengths[f] = tokens.len();
        for token in tokens {
            let entry = counts.entry(token.clone()).or_insert([0; F]);
            entry[f] = entry[f].saturating_add(1);
        }
    }
    (counts, lengths)
}

/// Every document's field norms: `(1 - B) + B * (len / avg)`, `avg` over the catalog.
fn set_norms(docs: &mut [Doc], lengths: &[[usize; F]]) {
    let n = docs.len() as f64;
    for f in 0..F {
        let total: usize = lengths.iter().map(|l| l[f]).sum();
        let avg = total as f64 / n;
        for (doc, length) in docs.iter_mut().zip(lengths) {
            let len = length[f] as f64;
            doc.norms[f] = if avg > 0.0 { (1.0 - B) + B * (len / avg) } else { 1.0 };
        }
    }
}
