//! Snapshots of the generated entry source for the guide's provider examples.
//!
//! `cargo insta review` (or `INSTA_UPDATE=always cargo test`) updates them after a
//! deliberate change to `src/entry.rs` or `src/entry/codec.js`.

use codemode_protocol::{ProviderDescriptor, entry_source};

/// The entry scope itself, without the codec body that every source shares.
fn scope(code: &str, providers: &[ProviderDescriptor]) -> String {
    let source = entry_source(code, providers).unwrap();
    let end = source.find(").apply(void 0, ((texts, kinds) => {").expect("the codec follows the scope");
    source[..end].to_owned()
}

#[test]
fn the_whole_source_of_the_declaration_example() {
    let providers = [ProviderDescriptor::new("store", ["listUsers", "findUser"])];
    insta::assert_snapshot!(
        entry_source("async () => { const v = await store; return typeof v }", &providers).unwrap()
    );
}

#[test]
fn options_object_provider() {
    let providers = [ProviderDescriptor::new("store", ["find"]).positional_args(false)];
    insta::assert_snapshot!(scope("async () => store.find({ id: 7 })", &providers));
}

#[test]
fn prelude_example() {
    let providers =
        [ProviderDescriptor::new("store", ["listUsers"]).prelude("store.helpers = { twice: (n) => n * 2 }")];
    insta::assert_snapshot!(scope("async () => store.helpers.twice(21)", &providers));
}

#[test]
fn proxy_source_example() {
    let providers = [ProviderDescriptor::new("api", ["v1.users.list"]).proxy_source(
        "const api = { v1: { users: { list: async () => {
  const json = await __dispatch('api', 'v1.users.list', __stringifyForDispatch([]))
  const data = __parseForDispatch(json)
  if (data.error) throw new Error(data.error)
  return data.result
} } } };",
    )];
    insta::assert_snapshot!(scope("async () => await api.v1.users.list()", &providers));
}

#[test]
fn statements_with_top_level_await() {
    let providers =
        [ProviderDescriptor::new("store", ["listUsers"]), ProviderDescriptor::new("fetch", ["x"])];
    insta::assert_snapshot!(scope("const users = await store.listUsers()\nusers.length", &providers));
}
