//! Keys become URL path segments here, and only here. Every segment is
//! percent-encoded, so a key can never smuggle in a query parameter; and keys
//! Consul would mangle are refused before anything is sent.

use reqwest::Url;

/// Why a key is refused; the message names the key and the fix.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("the key is empty; give a key like `service/db/leader`".into());
    }
    if key.starts_with('/') {
        return Err(format!(
            "key `{key}` starts with `/`; Consul keys are relative, drop the leading slash"
        ));
    }
    if key.ends_with('/') {
        return Err(format!(
            "key `{key}` ends with `/`; a lock key names one entry, drop the trailing slash"
        ));
    }
    if key.contains("//") {
        return Err(format!(
            "key `{key}` contains `//`; Consul's HTTP server folds it away, use single slashes"
        ));
    }
    if key.split('/').any(|s| s == "." || s == "..") {
        return Err(format!(
            "key `{key}` has a `.` or `..` segment; URLs fold those away, rename the key"
        ));
    }
    if let Some(c) = key.chars().find(|&c| !printable(c)) {
        return Err(format!(
            "key `{}` contains U+{:04X}, which Consul refuses in a key; use printable characters only",
            key.escape_debug(),
            c as u32,
        ));
    }
    if key.trim() != key {
        return Err(format!(
            "key `{key}` starts or ends with white space; recent Consul servers reject that"
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

/// Appends `segments` and then each `/`-separated part of `key` to `base`'s
/// path, percent-encoding each part. `key` must have passed [`check_key`].
pub fn url_for(base: &Url, segments: &[&str], key: &str) -> Url {
    let mut url = base.clone();
    {
        let mut path = url
            .path_segments_mut()
            .expect("the Consul address is an http(s) URL, which has a path");
        path.pop_if_empty();
        path.extend(segments);
        if !key.is_empty() {
            path.extend(key.split('/'));
        }
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_characters_are_encoded_per_segment() {
        let base = Url::parse("http://127.0.0.1:8500/").unwrap();
        let url = url_for(&base, &["v1", "kv"], "a?b c#d/é&x=1%");
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8500/v1/kv/a%3Fb%20c%23d/%C3%A9&x=1%25"
        );
        assert_eq!(url.query(), None);
    }

    #[test]
    fn a_base_path_prefix_is_kept() {
        let base = Url::parse("https://proxy.example/consul/").unwrap();
        let url = url_for(&base, &["v1", "kv"], "k");
        assert_eq!(url.as_str(), "https://proxy.example/consul/v1/kv/k");
    }

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
}
