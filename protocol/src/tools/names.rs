//! Sandbox names: a tool named elsewhere (`list-issues`, `github.search`, `2fa code`)
//! gets a JavaScript identifier the program and the declarations use.

use std::borrow::Cow;

/// Tool names a program cannot call through a provider, so they are renamed: the
/// provider's proxy answers `then` with `undefined`, so that awaiting a provider calls
/// nothing.
pub const RESERVED_TOOL_NAMES: &[&str] = &["then"];

/// The name a tool takes in the sandbox and in the declarations.
///
/// A name of ASCII letters, digits, `_` and `$` that does not start with a digit stays
/// as it is. Otherwise every other character becomes `_`, a leading digit gets a `_`
/// before it, and a reserved name ([`RESERVED_TOOL_NAMES`]) gets a `_` after it. The
/// result is always an identifier; two names may meet on one result, which a
/// [`super::ToolTable`] refuses.
///
/// ```
/// use codemode_protocol::tools::sandbox_name;
/// assert_eq!(sandbox_name("findUser"), "findUser");
/// assert_eq!(sandbox_name("list-issues"), "list_issues");
/// assert_eq!(sandbox_name("github.search"), "github_search");
/// assert_eq!(sandbox_name("2fa code"), "_2fa_code");
/// assert_eq!(sandbox_name("then"), "then_");
/// assert_eq!(sandbox_name(""), "_");
/// ```
pub fn sandbox_name(name: &str) -> Cow<'_, str> {
    let identifier_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
    let starts_with_digit = name.starts_with(|c: char| c.is_ascii_digit());
    let reserved = RESERVED_TOOL_NAMES.contains(&name);
    if !name.is_empty() && !starts_with_digit && !reserved && name.chars().all(identifier_char) {
        return Cow::Borrowed(name);
    }
    let mut sandbox = String::with_capacity(name.len() + 2);
    if name.is_empty() || starts_with_digit {
        sandbox.push('_');
    }
    sandbox.extend(name.chars().map(|c| if identifier_char(c) { c } else { '_' }));
    if reserved {
        sandbox.push('_');
    }
    Cow::Owned(sandbox)
}
