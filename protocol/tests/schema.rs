//! The committed JSON Schemas under `protocol/schema/` match the wire types.

#[test]
fn committed_schemas_match_the_wire_types() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/schema");
    for (file, text) in codemode_protocol::schema::schemas() {
        let path = format!("{dir}/{file}");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == text,
            "{path} is missing or out of date with the wire types. Regenerate it with `cargo xtask schema` and commit it."
        );
    }
}
