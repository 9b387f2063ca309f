//! Discovery over the public fixture (`conformance/discovery/`): the ranking's quality on
//! a pinned query list, exact answers, order independence, describe and its pinned texts.

use codemode_protocol::discovery::{Catalog, CatalogIndex, SearchRequest};
use serde_json::Value as Json;

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/discovery").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn catalog() -> Catalog {
    serde_json::from_str(&fixture("catalog.json")).unwrap()
}

/// The query list: `(query, expected path, kind)`.
fn queries() -> Vec<(String, String, String)> {
    let file: Json = serde_json::from_str(&fixture("queries.json")).unwrap();
    file["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            let field = |name: &str| q[name].as_str().unwrap().to_owned();
            (field("query"), field("expect"), field("kind"))
        })
        .collect()
}

#[test]
fn the_query_list_finds_its_tools_first_nine_times_in_ten_and_always_in_the_top_three() {
    let index = CatalogIndex::new(catalog());
    let queries = queries();
    let (mut top1, mut top3) = (0, 0);
    let mut misses = Vec::new();
    for (query, expected, kind) in &queries {
        let answer = index.search(&SearchRequest::new(query.as_str())).unwrap();
        let paths: Vec<&str> = answer.hits.iter().map(|h| h.path.as_str()).collect();
        let rank = paths.iter().position(|p| p == expected);
        top1 += usize::from(rank == Some(0));
        top3 += usize::from(rank.is_some_and(|r| r < 3));
        if rank != Some(0) {
            misses.push(format!(
                "{kind} {query:?}: {expected} at {rank:?}, got {:?}",
                &paths[..paths.len().min(3)]
            ));
        }
    }
    eprintln!("top-1 {top1}/{}, top-3 {top3}/{}\n{}", queries.len(), queries.len(), misses.join("\n"));
    assert_eq!(queries.len(), 46);
    assert_eq!((top1, top3), (43, 46));
    assert!(top1 * 10 >= queries.len() * 9 && top3 == queries.len());
}

/// Every query's answer as one JSON line, the bytes the Node peer must match.
fn answers(index: &CatalogIndex) -> String {
    let mut out = String::new();
    for (query, _, _) in queries() {
        let answer = index.search(&SearchRequest::new(query)).unwrap();
        out.push_str(&serde_json::to_string(&answer).unwrap());
        out.push('\n');
    }
    out
}

#[test]
fn a_shuffled_catalog_answers_byte_for_byte_the_same() {
    let mut shuffled = catalog();
    // A fixed permutation without a random crate: reverse the providers, rotate each one's tools.
    shuffled.providers.reverse();
    for (i, provider) in shuffled.providers.iter_mut().enumerate() {
        let by = (i * 7 + 3) % provider.tools.len();
        provider.tools.rotate_left(by);
    }
    assert_ne!(shuffled, catalog());
    assert_eq!(answers(&CatalogIndex::new(shuffled)), answers(&CatalogIndex::new(catalog())));
}

#[test]
fn a_search_answers_exact_json() {
    let index = CatalogIndex::new(catalog());
    let request = SearchRequest { limit: Some(2), ..SearchRequest::new("delete a Kubernetes namespace") };
    let answer = serde_json::to_string(&index.search(&request).unwrap()).unwrap();
    assert_eq!(answer, EXACT_NAMESPACE);
    let request = SearchRequest {
        provider: Some("gmail".into()),
        limit: Some(80),
        offset: Some(48),
        ..SearchRequest::new("")
    };
    let answer = serde_json::to_string(&index.search(&request).unwrap()).unwrap();
    assert_eq!(answer, EXACT_PAGE);
    let unknown = SearchRequest { provider: Some("gmial".into()), ..SearchRequest::new("x") };
    assert_eq!(
        index.search(&unknown).unwrap_err().to_string(),
        "No provider \"gmial\" in the catalog. Its providers are: aws_s3, datadog, github, gitlab, gmail, google_calendar, google_drive, hubspot, jira, kubernetes, linear, notion, pagerduty, postgres, sentry, shopify, slack, stripe, twilio, zendesk."
    );
}

const EXACT_NAMESPACE: &str = r#"{"query":"delete a Kubernetes namespace","tools":1000,"matches":128,"offset":0,"limit":2,"hits":[{"path":"kubernetes.namespaces_delete","description":"Delete a namespace and everything in it.","needsApproval":true,"destructive":true,"score":15.9013},{"path":"kubernetes.resources_delete","description":"Delete a resource of any kind.","needsApproval":true,"destructive":true,"score":13.5681}]}"#;
const EXACT_PAGE: &str = r#"{"query":"","provider":"gmail","tools":1000,"matches":50,"offset":48,"limit":50,"note":"The limit 80 is over the most one search answers; this answer holds at most 50 hits.","hits":[{"path":"gmail.update_signature","description":"Set the signature used when sending from an address.","needsApproval":false,"destructive":false,"score":0},{"path":"gmail.watch_mailbox","description":"Start push notifications about mailbox changes to a Pub/Sub topic.","needsApproval":false,"destructive":false,"score":0}]}"#;

#[test]
fn describe_answers_the_declaration_or_the_nearest_paths() {
    let index = CatalogIndex::new(catalog());
    let described = index.describe("kubernetes.namespaces_delete").unwrap();
    assert_eq!(
        described.declaration,
        "/** Workloads and resources in Kubernetes clusters, plus Helm releases. */
declare const kubernetes: {
  /**
   * Delete a namespace and everything in it.
   * @param name Resource name
   */
  namespaces_delete(name: string): Promise<unknown>;
};
"
    );
    assert_eq!((described.destructive, described.needs_approval), (true, true));
    assert_eq!(
        index.describe("kubernetes.namespace_delete").unwrap_err().to_string(),
        "No tool \"kubernetes.namespace_delete\" in the catalog. The nearest paths: kubernetes.namespaces_delete, kubernetes.namespaces_create, kubernetes.namespaces_list, kubernetes.resources_delete, kubernetes.pods_delete. Describe one of them, or search."
    );
    assert_eq!(
        index.describe("zzz.qqq").unwrap_err().to_string(),
        "No tool \"zzz.qqq\" in the catalog, and no path near it. Search for the tool by what it does."
    );
}

#[test]
fn the_summary_layer_is_a_small_part_of_every_declaration() {
    use codemode_protocol::discovery::discovery_code_tool;
    let catalog = catalog();
    let specs: Vec<_> = catalog.providers.iter().map(|p| p.spec()).collect();
    let full = codemode_protocol::ToolTable::new(specs).unwrap().code_tool().description.len();
    let summary = discovery_code_tool(&catalog).description.len();
    eprintln!("every declaration {full} bytes, summary layer {summary} bytes");
    assert!(summary * 20 < full, "{summary} vs {full}");
}
