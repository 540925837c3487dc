//! lockrun's one rule for keys, checked before any request or file on every
//! backend, so that a key means the same lock wherever it is typed and a
//! refusal never comes after a write. Consul's is the strictest, and a
//! key must be able to move between backends, so the rule is Consul's:
//! not empty; relative (no leading `/`), no trailing `/`, no `//`, no `.`
//! or `..` segment; printable characters only (Go's `unicode.IsPrint`,
//! which Consul applies: no newline, tab or other control or format
//! character), no white space at either end; at most 4096 bytes. A backend
//! may refuse more (local: names it keeps for its own files, a segment too
//! long for a file name).

/// Why `key` is refused; the message names the key and the fix.
pub fn check(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("the key is empty; give a key like `service/db/leader`".into());
    }
    if key.starts_with('/') {
        return Err(format!(
            "key `{key}` starts with `/`; keys are relative, drop the leading slash"
        ));
    }
    if key.ends_with('/') {
        return Err(format!(
            "key `{key}` ends with `/`; a lock key names one entry, drop the trailing slash"
        ));
    }
    if key.contains("//") {
        return Err(format!(
            "key `{key}` contains `//`; Consul and file paths fold it away, use single slashes"
        ));
    }
    if key.split('/').any(|s| s == "." || s == "..") {
        return Err(format!(
            "key `{key}` has a `.` or `..` segment; URLs and file paths fold those away, rename the key"
        ));
    }
    if let Some(c) = key.chars().find(|&c| !printable(c)) {
        return Err(format!(
            "key `{}` contains U+{:04X}, which no key may hold (Consul refuses it); use printable characters only",
            key.escape_debug(),
            c as u32,
        ));
    }
    if key.trim() != key {
        return Err(format!(
            "key `{key}` starts or ends with white space; recent Consul servers reject that, so no backend takes it"
        ));
    }
    if key.len() > 4096 {
        return Err("the key is longer than 4096 bytes; use a shorter key".into());
    }
    Ok(())
}

/// Go's `unicode.IsPrint`, which Consul's HTTP server applies to the
/// decoded path: letters, marks, numbers, punctuation, symbols and the ASCII
/// space. Without Unicode tables we refuse what falls outside: control
/// characters, white space other than the space (U+2028 among them), the
/// invisible format characters (U+FEFF, bidi marks...), private use and
/// noncharacters.
fn printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let format = matches!(
        c,
        '\u{AD}'
            | '\u{600}'..='\u{605}'
            | '\u{61C}'
            | '\u{6DD}'
            | '\u{70F}'
            | '\u{890}'..='\u{891}'
            | '\u{8E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'..='\u{E007F}'
    );
    let private = matches!(c, '\u{E000}'..='\u{F8FF}' | '\u{F0000}'..);
    let nonchar = matches!(c, '\u{FDD0}'..='\u{FDEF}') || (c as u32 & 0xFFFE) == 0xFFFE;
    !(format || private || nonchar)
}

#[cfg(test)]
mod tests {
    use super::check as check_key;

    #[test]
    fn bad_keys_are_refused() {
        for key in [
            "",
            "/a",
            "a/",
            "a//b",
            "a/../b",
            ".",
            "a/./b",
            "a\nb",
            " a",
            "a ",
            "a\u{2028}b",
            "\u{FEFF}a",
            "a\u{200B}",
            "a\u{A0}b",
            "a\u{E000}",
            "a\tb",
        ] {
            assert!(check_key(key).is_err(), "{key:?} should be refused");
        }
        for key in ["a", "service/db/leader", "a?b c#d", "ünï/cödé", "a.b/..c"] {
            assert!(check_key(key).is_ok(), "{key:?} should be accepted");
        }
    }

    #[test]
    fn a_long_key_is_refused_at_4096_bytes() {
        assert!(check_key(&"k".repeat(4096)).is_ok());
        assert!(check_key(&"k".repeat(4097)).is_err());
    }
}
