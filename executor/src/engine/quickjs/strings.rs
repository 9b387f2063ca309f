//! JavaScript strings out of QuickJS as Rust strings: a lone surrogate becomes U+FFFD.
//!
//! QuickJS writes a lone surrogate as its three-byte (WTF-8) form, which is not UTF-8;
//! each such triple is one replacement character, as WHATWG's encoders give.

use rquickjs::{Ctx, qjs};

/// The string's text; lone surrogates become U+FFFD.
pub(super) fn to_string_lossy(ctx: &Ctx<'_>, string: &rquickjs::String<'_>) -> String {
    if let Ok(text) = string.to_string() {
        return text;
    }
    let mut len = 0usize;
    let raw = string.as_value().as_raw();
    // SAFETY: `raw` is a live string of this context; QuickJS returns a buffer of `len`
    // bytes (or null) that is freed below and not used after.
    unsafe {
        let ptr = qjs::JS_ToCStringLen(ctx.as_raw().as_ptr(), &mut len, raw);
        if ptr.is_null() {
            return String::new();
        }
        let text = wtf8_lossy(std::slice::from_raw_parts(ptr.cast::<u8>(), len));
        qjs::JS_FreeCString(ctx.as_raw().as_ptr(), ptr);
        text
    }
}

/// WTF-8 bytes as UTF-8: each encoded surrogate is one U+FFFD; anything else invalid, lossy.
pub(super) fn wtf8_lossy(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    let mut start = 0;
    let mut i = 0;
    while i + 2 < bytes.len() {
        if bytes[i] == 0xED && (0xA0..=0xBF).contains(&bytes[i + 1]) && (0x80..=0xBF).contains(&bytes[i + 2])
        {
            text.push_str(&String::from_utf8_lossy(&bytes[start..i]));
            text.push('\u{FFFD}');
            i += 3;
            start = i;
        } else {
            i += 1;
        }
    }
    text.push_str(&String::from_utf8_lossy(&bytes[start..]));
    text
}

#[cfg(test)]
mod tests {
    use super::wtf8_lossy;

    #[test]
    fn each_lone_surrogate_is_one_replacement_character() {
        assert_eq!(wtf8_lossy(b"a\xED\xA0\x80b"), "a\u{FFFD}b");
        assert_eq!(wtf8_lossy(b"\xED\xA0\x80\xED\xB0\x80"), "\u{FFFD}\u{FFFD}");
        assert_eq!(wtf8_lossy("plain é 😀".as_bytes()), "plain é 😀");
    }
}
