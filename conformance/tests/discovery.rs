//! The Node peer's discovery ranking (`peers/node/search.js`) against the Rust one: every
//! query of `discovery/queries.json` over `discovery/catalog.json` answers the same bytes.

use std::path::Path;
use std::process::Command;

use codemode_protocol::discovery::{Catalog, CatalogIndex, SearchRequest};

#[test]
fn the_node_peer_ranks_the_query_list_byte_for_byte_as_rust_does() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (catalog, queries) = (root.join("discovery/catalog.json"), root.join("discovery/queries.json"));
    let output = Command::new("node")
        .arg(root.join("peers/node/search.js"))
        .args([&catalog, &queries])
        .output()
        .expect("node runs: install Node.js 20 or later so that `node` is on PATH");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let node = String::from_utf8(output.stdout).unwrap();

    let index = CatalogIndex::new(
        serde_json::from_str::<Catalog>(&std::fs::read_to_string(catalog).unwrap()).unwrap(),
    );
    let list: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(queries).unwrap()).unwrap();
    let mut rust = String::new();
    for query in list["queries"].as_array().unwrap() {
        let answer = index.search(&SearchRequest::new(query["query"].as_str().unwrap())).unwrap();
        rust.push_str(&serde_json::to_string(&answer).unwrap());
        rust.push('\n');
    }
    assert_eq!(node.lines().count(), 46);
    for (n, (node, rust)) in node.lines().zip(rust.lines()).enumerate() {
        assert_eq!(node, rust, "query {n}");
    }
    assert_eq!(node, rust);
}
