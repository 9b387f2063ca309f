//! Tidy: the executor's module boundaries, read from its parsed source (syn), not grepped.
//!
//! Checked: the graph of the executor's modules (one node per file) has no cycle; only
//! the engine bindings under `engine/<name>/` name their engine crate, and an engine
//! depends on nothing but `engine/`, the budget and `sync`; the runtime names no engine binding,
//! only the `Engine` trait's module; the core (`in_process/`, `runtime/`, `engine/`, the
//! budget) knows no other executor and no service; the host API (`api/`) depends on no
//! executor; the wire's client and server never depend on each other; cells depend only on
//! the host API (so they work over every executor); only `confine/` names the confinement crates.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("executor/src")
}

/// Every library source file as (module path, file), `bin/` aside (a crate of its own).
fn modules() -> Vec<(Vec<String>, PathBuf)> {
    let mut found = Vec::new();
    let mut stack = vec![src()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(src()).unwrap().to_path_buf();
            if relative.starts_with("bin") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut parts: Vec<String> =
                    relative.with_extension("").iter().map(|p| p.to_string_lossy().into_owned()).collect();
                if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
                    parts.pop();
                }
                found.push((parts, path));
            }
        }
    }
    found.sort();
    found
}

/// The paths a file names: each `use` tree flattened and each path expression or type.
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl Paths {
    fn tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.0.push([prefix.clone(), vec![n.ident.to_string()]].concat()),
            syn::UseTree::Rename(r) => self.0.push([prefix.clone(), vec![r.ident.to_string()]].concat()),
            syn::UseTree::Glob(_) => self.0.push(prefix.clone()),
            syn::UseTree::Group(g) => g.items.iter().for_each(|item| self.tree(prefix, item)),
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.0.push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }
}

fn paths_of(file: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(file).unwrap();
    let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{} parses: {e}", file.display()));
    let mut paths = Paths::default();
    paths.visit_file(&parsed);
    paths.0
}

/// `path`, written in `module`, from the crate's root; `None` for another crate's.
fn absolute(module: &[String], path: &[String]) -> Option<Vec<String>> {
    Some(match path.first().map(String::as_str) {
        Some("crate") => path[1..].to_vec(),
        Some("super") => {
            let mut base = module.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            [base, rest.to_vec()].concat()
        }
        Some("self") => [module.to_vec(), path[1..].to_vec()].concat(),
        _ => return None,
    })
}

/// Every name a module re-exports (`pub use`, `pub(crate) use`), from the crate's root, and
/// what it stands for: `wire::worker` is `wire::server::worker`.
fn aliases(modules: &[(Vec<String>, PathBuf)]) -> BTreeMap<Vec<String>, Vec<String>> {
    let mut aliases = BTreeMap::new();
    for (module, file) in modules {
        let parsed = syn::parse_file(&std::fs::read_to_string(file).unwrap()).unwrap();
        for item in parsed.items {
            let syn::Item::Use(item) = item else { continue };
            if matches!(item.vis, syn::Visibility::Inherited) {
                continue;
            }
            let mut paths = Paths::default();
            paths.tree(&mut Vec::new(), &item.tree);
            for path in paths.0 {
                if let (Some(name), Some(to)) = (path.last(), absolute(module, &path)) {
                    aliases.insert([module.clone(), vec![name.clone()]].concat(), to);
                }
            }
        }
    }
    aliases
}

/// The module a path of `module` names, if it is one of the crate's own, through the
/// crate root's and every module's re-exports.
fn target(
    module: &[String],
    path: &[String],
    known: &BTreeSet<Vec<String>>,
    aliases: &BTreeMap<Vec<String>, Vec<String>>,
) -> Option<Vec<String>> {
    let mut absolute = absolute(module, path)?;
    // A re-export stands for what it names; followed a few times (an alias of an alias).
    for _ in 0..4 {
        let alias = (1..=absolute.len()).rev().find_map(|n| {
            let to = aliases.get(&absolute[..n])?;
            (to.as_slice() != &absolute[..n]).then(|| [to.clone(), absolute[n..].to_vec()].concat())
        });
        match alias {
            Some(resolved) => absolute = resolved,
            None => break,
        }
    }
    (1..=absolute.len()).rev().map(|n| absolute[..n].to_vec()).find(|prefix| known.contains(prefix))
}

fn graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules = modules();
    let known: BTreeSet<Vec<String>> = modules.iter().map(|(m, _)| m.clone()).collect();
    let aliases = aliases(&modules);
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        let edges: BTreeSet<Vec<String>> = paths_of(file)
            .iter()
            .filter_map(|path| target(module, path, &known, &aliases))
            // A module naming its own children or itself is structure, not a dependency.
            .filter(|to| !to.starts_with(module) && !module.is_empty())
            .collect();
        graph.insert(module.clone(), edges);
    }
    graph
}

#[test]
fn the_executors_module_graph_has_no_cycle() {
    let graph = graph();
    // Depth-first search with colours; a grey node met again closes a cycle.
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        trail: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match state.get(node) {
            Some(2) => return None,
            Some(1) => {
                let start = trail.iter().position(|n| n == node).unwrap_or(0);
                return Some([trail[start..].to_vec(), vec![node.clone()]].concat());
            }
            _ => {}
        }
        state.insert(node.clone(), 1);
        trail.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            // A parent's mod.rs depends on its children by declaring them; a child naming its
            // parent's items is the usual Rust layering and not a cycle between files.
            if node.starts_with(next) {
                continue;
            }
            if let Some(cycle) = visit(next, graph, state, trail) {
                return Some(cycle);
            }
        }
        trail.pop();
        state.insert(node.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut state, &mut Vec::new()) {
            let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
            panic!("the executor's modules depend on each other in a cycle: {}", names.join(" -> "));
        }
    }
}

#[test]
fn only_engine_bindings_name_their_engine_crate() {
    let engine_crates = [("rquickjs", "quickjs"), ("v8", "v8")];
    for (module, file) in modules() {
        for path in paths_of(&file) {
            for (krate, binding) in engine_crates {
                if path.first().is_some_and(|first| first == krate) {
                    assert!(
                        module.len() >= 2 && module[0] == "engine" && module[1] == binding,
                        "{} names `{}` ({}); only engine/{binding}/ may",
                        file.display(),
                        path.join("::"),
                        krate
                    );
                }
            }
        }
    }
}

#[test]
fn the_runtime_names_no_engine_binding() {
    let graph = graph();
    for (module, edges) in &graph {
        if module.first().is_some_and(|m| m == "runtime") {
            for to in edges {
                assert!(
                    !(to.len() >= 2 && to[0] == "engine"),
                    "{} depends on the engine binding {}; the runtime sees only the Engine trait",
                    module.join("::"),
                    to.join("::")
                );
            }
        }
    }
    assert!(
        graph
            .get(&vec!["runtime".to_owned()])
            .is_some_and(|edges| edges.contains(&vec!["engine".to_owned()])),
        "the runtime drives engines through the Engine trait"
    );
}

#[test]
fn only_confinement_names_the_confinement_crates() {
    for (module, file) in modules() {
        for path in paths_of(&file) {
            if path.first().is_some_and(|first| first == "seccompiler" || first == "landlock") {
                assert!(
                    module.first().is_some_and(|m| m == "confine"),
                    "{} names `{}`; only confine/ may",
                    file.display(),
                    path.join("::")
                );
            }
        }
    }
}

/// Whether `module` is `prefix` or inside it.
fn within(module: &[String], prefix: &[&str]) -> bool {
    module.len() >= prefix.len() && module.iter().zip(prefix).all(|(m, p)| m == p)
}

/// Every edge of the graph from a module within `from` to one within any of `to`, as text.
fn edges_between(from: &[&str], to: &[&[&str]]) -> Vec<String> {
    let mut found = Vec::new();
    for (module, edges) in &graph() {
        if !within(module, from) {
            continue;
        }
        for edge in edges {
            if to.iter().any(|prefix| within(edge, prefix)) {
                found.push(format!("{} -> {}", module.join("::"), edge.join("::")));
            }
        }
    }
    found
}

#[test]
fn engines_depend_only_on_the_engine_trait_the_budget_and_sync() {
    let graph = graph();
    let mut strays = Vec::new();
    for (module, edges) in &graph {
        if !within(module, &["engine"]) {
            continue;
        }
        for edge in edges {
            if !within(edge, &["engine"]) && !within(edge, &["budget"]) && !within(edge, &["sync"]) {
                strays.push(format!("{} -> {}", module.join("::"), edge.join("::")));
            }
        }
    }
    assert!(strays.is_empty(), "an engine depends on more than engine/, the budget and sync: {strays:?}");
}

#[test]
fn the_wires_client_and_server_never_depend_on_each_other() {
    let client = edges_between(&["wire", "client"], &[&["wire", "server"]]);
    assert!(client.is_empty(), "the wire's client depends on its server: {client:?}");
    let server = edges_between(&["wire", "server"], &[&["wire", "client"]]);
    assert!(server.is_empty(), "the wire's server depends on its client: {server:?}");
}

#[test]
fn the_core_knows_no_other_executor_and_no_service() {
    let layers: [&[&str]; 5] = [&["process"], &["remote"], &["wire"], &["service"], &["mcp"]];
    for core in [&["in_process"][..], &["runtime"], &["engine"], &["budget"]] {
        let strays = edges_between(core, &layers);
        assert!(strays.is_empty(), "the core depends on what is built above it: {strays:?}");
    }
}

#[test]
fn the_host_api_depends_on_no_executor() {
    let executors: [&[&str]; 6] =
        [&["in_process"], &["process"], &["remote"], &["wire"], &["service"], &["mcp"]];
    let strays = edges_between(&["api"], &executors);
    assert!(strays.is_empty(), "the host API depends on an executor: {strays:?}");
}

#[test]
fn cells_depend_only_on_the_host_api() {
    let graph = graph();
    let mut strays = Vec::new();
    for (module, edges) in &graph {
        if !within(module, &["cells"]) {
            continue;
        }
        for edge in edges {
            if !within(edge, &["cells"]) && !within(edge, &["api"]) && !within(edge, &["sync"]) {
                strays.push(format!("{} -> {}", module.join("::"), edge.join("::")));
            }
        }
    }
    assert!(strays.is_empty(), "cells depend on more than the host API (and sync): {strays:?}");
    assert!(graph.contains_key(&vec!["cells".to_owned()]), "the cells module is where this test looks");
}
