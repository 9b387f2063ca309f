//! `--fixture`: fixed results keyed by "provider.tool", for quick experiments.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use codemode_protocol::{
    Dispatch, Latch, ProviderDescriptor, ToolCall, ToolNotFoundError, Value, create_envelope_dispatch,
};

pub(crate) struct Fixture {
    results: Arc<BTreeMap<String, Value>>,
}

impl Fixture {
    pub(crate) fn load(path: &Path) -> Result<Fixture, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the fixture {}: {e}", path.display()))?;
        let results: BTreeMap<String, Value> = serde_json::from_str(&text).map_err(|e| {
            format!(
                "the fixture {} is not a JSON object mapping \"provider.tool\" to a result: {e}",
                path.display()
            )
        })?;
        if let Some(key) = results.keys().find(|k| !k.contains('.')) {
            return Err(format!(
                "the fixture key \"{key}\" must be \"provider.tool\", such as \"store.listUsers\""
            ));
        }
        Ok(Fixture { results: Arc::new(results) })
    }

    /// One provider per prefix, declaring the tools the fixture answers.
    pub(crate) fn descriptors(&self) -> Vec<ProviderDescriptor> {
        let mut tools: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for key in self.results.keys() {
            if let Some((provider, tool)) = key.split_once('.') {
                tools.entry(provider).or_default().push(tool);
            }
        }
        tools.into_iter().map(|(provider, tools)| ProviderDescriptor::new(provider, tools)).collect()
    }

    pub(crate) fn dispatch(&self) -> impl Dispatch {
        let results = self.results.clone();
        create_envelope_dispatch(Latch::open(), move |call: ToolCall| {
            let answer = results
                .get(&format!("{}.{}", call.provider, call.tool))
                .cloned()
                .ok_or_else(|| ToolNotFoundError::new(call.tool));
            async move { answer }
        })
    }
}
