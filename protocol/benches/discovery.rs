//! Discovery's search over 20,000 tools (the public fixture repeated under 20 names per
//! provider): the median of the query list's searches beside a naive substring scan of
//! the same catalog. Prints medians; asserts nothing.

use std::time::{Duration, Instant};

use codemode_protocol::discovery::{Catalog, CatalogIndex, SearchRequest};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/discovery");
    let fixture: Catalog =
        serde_json::from_str(&std::fs::read_to_string(root.join("catalog.json")).unwrap()).unwrap();
    let list: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("queries.json")).unwrap()).unwrap();
    let queries: Vec<String> =
        list["queries"].as_array().unwrap().iter().map(|q| q["query"].as_str().unwrap().to_owned()).collect();
    let mut catalog = Catalog::default();
    for copy in 0..20 {
        for provider in &fixture.providers {
            let mut provider = provider.clone();
            provider.name = format!("{}_{copy}", provider.name);
            catalog.providers.push(provider);
        }
    }
    let started = Instant::now();
    let index = CatalogIndex::new(catalog.clone());
    println!("index of {} tools built in {:?}", catalog.tool_count(), started.elapsed());
    let (mut search, mut scan) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        for query in &queries {
            let started = Instant::now();
            std::hint::black_box(index.search(&SearchRequest::new(query.as_str())).unwrap());
            search.push(started.elapsed());
            let started = Instant::now();
            std::hint::black_box(naive(&catalog, query));
            scan.push(started.elapsed());
        }
    }
    let (search, scan) = (median(search), median(scan));
    println!("search median {search:?} over {} searches", queries.len() * 5);
    println!(
        "naive substring scan median {scan:?}; search / scan = {:.2}",
        search.as_secs_f64() / scan.as_secs_f64()
    );
}

/// The reference: every tool whose name or description holds any query word, lowercased.
fn naive(catalog: &Catalog, query: &str) -> usize {
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    catalog
        .providers
        .iter()
        .flat_map(|p| &p.tools)
        .filter(|t| {
            let text = format!("{} {}", t.name, t.description).to_lowercase();
            words.iter().any(|w| text.contains(w.as_str()))
        })
        .count()
}
