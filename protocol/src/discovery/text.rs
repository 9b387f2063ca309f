//! The pinned text rules of discovery: tokens, plural folding, stop words, the one-letter
//! typo test, and the logarithm the ranking uses. Another implementation writes these
//! again rule for rule (`conformance/peers/node/search.js`) and must give the same bytes.
//!
//! Every rule works on ASCII only: a character outside `[A-Za-z0-9]` separates tokens,
//! so the rules are the same whether a string is walked by code point or by UTF-16 unit.

/// Words too common to tell tools apart; dropped from text and queries alike. Sorted.
pub const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "any", "are", "as", "at", "be", "by", "can", "could", "do", "does", "for",
    "from", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "let", "me", "my", "need",
    "of", "on", "or", "our", "please", "should", "so", "some", "than", "that", "the", "their", "them",
    "then", "there", "these", "this", "those", "to", "via", "want", "was", "we", "what", "when", "where",
    "which", "who", "will", "with", "would", "you", "your",
];

/// Words that stand for one another in what people ask of tools, each group as tokens
/// (folded). A query's term also searches the other words of its groups, at a lower weight.
pub const SYNONYMS: &[&[&str]] = &[
    &["add", "create", "make", "new", "open", "start", "append", "write"],
    &["approval", "approve", "accept"],
    &["bug", "defect", "issue"],
    &["cancel", "stop", "abort", "end", "terminate"],
    &["change", "update", "edit", "modify", "set", "alter"],
    &["combine", "merge", "dedupe", "duplicate"],
    &["contact", "person", "people", "customer"],
    &["delete", "remove", "drop", "destroy", "erase", "trash"],
    &["directory", "dir", "folder"],
    &["doc", "document", "page"],
    &["email", "mail", "inbox", "mailbox"],
    &["emoji", "reaction", "react"],
    &["find", "search", "lookup", "look", "query"],
    &["get", "fetch", "read", "retrieve", "show", "view", "see"],
    &["holiday", "vacation", "away", "leave"],
    &["list", "all", "every", "enumerate", "browse"],
    &["log", "output", "print", "stdout"],
    &["money", "payment", "charge", "refund", "pay"],
    &["mute", "silence", "snooze", "quiet"],
    &["phone", "sms", "text", "mobile"],
    &["post", "send", "deliver", "publish"],
    &["quota", "space", "storage", "capacity"],
    &["recurring", "subscription", "billing", "plan"],
    &["reply", "respond", "answer"],
    &["repo", "repository", "project"],
    &["restart", "reboot", "bounce", "redeploy"],
    &["rollback", "revert", "undo", "roll"],
    &["sheet", "spreadsheet"],
    &["slow", "slowest", "top", "expensive"],
    &["user", "member", "account", "people"],
];

/// The tokens of `text`, in order: words split at non-alphanumerics and at camelCase
/// humps, lowercased, plurals folded ([`fold`]), stop words and one-letter tokens dropped.
///
/// `"listPullRequests of my_repo"` gives `["list", "pull", "request", "repo"]`.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
        for part in humps(word) {
            let lower = part.to_ascii_lowercase();
            if lower.len() < 2 || STOP_WORDS.binary_search(&lower.as_str()).is_ok() {
                continue;
            }
            out.push(fold(&lower));
        }
    }
    out
}

/// `word` (ASCII alphanumerics) split before an upper-case letter that follows a lower-case
/// letter or a digit, and before the last capital of a run followed by a lower-case letter:
/// `getHTTPResponse2Code` gives `get`, `HTTP`, `Response2`, `Code`.
fn humps(word: &str) -> Vec<&str> {
    let bytes = word.as_bytes();
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..bytes.len() {
        let (before, here) = (bytes[i - 1], bytes[i]);
        let next_lower = bytes.get(i + 1).is_some_and(u8::is_ascii_lowercase);
        let hump = here.is_ascii_uppercase()
            && (before.is_ascii_lowercase()
                || before.is_ascii_digit()
                || (before.is_ascii_uppercase() && next_lower));
        if hump {
            parts.push(&word[start..i]);
            start = i;
        }
    }
    parts.push(&word[start..]);
    parts
}

/// Light plural folding of a lowercase token: `ies` → `y` (longer than 4), `sses` → `ss`,
/// `xes`/`ches`/`shes` lose `es`; a token ending in `ss`, `us` or `is` stays; any other
/// ending in `s` (3 letters or more) loses it. `policies` → `policy`, `ids` → `id`.
pub fn fold(token: &str) -> String {
    let n = token.len();
    if n > 4 && token.ends_with("ies") {
        return format!("{}y", &token[..n - 3]);
    }
    if token.ends_with("sses") || token.ends_with("xes") || token.ends_with("ches") || token.ends_with("shes")
    {
        return token[..n - 2].to_owned();
    }
    if token.ends_with("ss") || token.ends_with("us") || token.ends_with("is") {
        return token.to_owned();
    }
    if n >= 3 && token.ends_with('s') {
        return token[..n - 1].to_owned();
    }
    token.to_owned()
}

/// Whether `a` becomes `b` by one edit: a letter changed, added or dropped, or two
/// neighbours swapped. Equal strings are not one edit apart.
pub fn one_edit(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[prefix..], &b[prefix..]);
    match a.len() as isize - b.len() as isize {
        0 if a.is_empty() => false,
        0 => a[1..] == b[1..] || (a.len() >= 2 && a[0] == b[1] && a[1] == b[0] && a[2..] == b[2..]),
        1 => a[1..] == *b,
        -1 => *a == b[1..],
        _ => false,
    }
}

/// ln 2: the double both implementations write as `0.6931471805599453`.
const LN_2: f64 = std::f64::consts::LN_2;

/// The natural logarithm of `x > 0` from `+ - * /` alone, so that every implementation
/// following these steps gets the same bits (a platform's `ln` may differ in the last
/// place): `x = m·2^e` with `m` in [1, 2), then `ln m = 2·atanh((m-1)/(m+1))` by 24 terms
/// of its series, plus `e·ln 2`.
pub fn ln(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 {
        return f64::NAN;
    }
    let (mut m, mut e) = (x, 0i32);
    while m >= 2.0 {
        m /= 2.0;
        e += 1;
    }
    while m < 1.0 {
        m *= 2.0;
        e -= 1;
    }
    let z = (m - 1.0) / (m + 1.0);
    let z2 = z * z;
    let (mut term, mut sum) = (z, 0.0);
    for k in 0..24 {
        sum += term / f64::from(2 * k + 1);
        term *= z2;
    }
    2.0 * sum + f64::from(e) * LN_2
}

/// The Levenshtein distance of two strings, by characters (for suggestions only).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// The first sentence of `text`: up to its first `.` followed by ASCII whitespace or the
/// end, ASCII whitespace trimmed; over 200 characters, its first 199 and `…`.
pub fn first_sentence(text: &str) -> String {
    let bytes = text.as_bytes();
    let end = (0..bytes.len())
        .find(|&i| bytes[i] == b'.' && bytes.get(i + 1).is_none_or(u8::is_ascii_whitespace))
        .map_or(text.len(), |i| i + 1);
    let sentence = text[..end].trim_matches(|c: char| c.is_ascii_whitespace());
    if sentence.chars().count() <= 200 {
        return sentence.to_owned();
    }
    let mut cut: String = sentence.chars().take(199).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_split_humps_and_underscores_fold_plurals_and_drop_stop_words() {
        assert_eq!(tokens("listPullRequests of my_repo"), ["list", "pull", "request", "repo"]);
        assert_eq!(tokens("getHTTPResponse2Code"), ["get", "http", "response2", "code"]);
        assert_eq!(
            tokens("Policies, boxes, branches; status, address(es) ids"),
            ["policy", "box", "branch", "status", "address", "es", "id"]
        );
        assert_eq!(tokens("l'été à Paris"), ["paris"]);
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn one_edit_is_a_change_an_insertion_a_deletion_or_a_swap() {
        assert!(one_edit("schedule", "schedle"));
        assert!(one_edit("schedle", "schedule"));
        assert!(one_edit("schedule", "schedulx"));
        assert!(one_edit("schedule", "shcedule"));
        assert!(!one_edit("schedule", "schedule"));
        assert!(!one_edit("schedule", "shcedlue"));
        assert!(!one_edit("abc", "a"));
    }

    #[test]
    fn ln_agrees_with_the_platform_to_the_last_places() {
        for x in [1.0, 1.5, 2.0, 10.0, 1234.5, 0.25, 20001.5] {
            assert!((ln(x) - x.ln()).abs() < 1e-14, "{x}");
        }
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(first_sentence("Open a PR. Then wait."), "Open a PR.");
        assert_eq!(first_sentence(" Use v1.2 now "), "Use v1.2 now");
        assert_eq!(first_sentence(&"x".repeat(300)).chars().count(), 200);
    }
}
