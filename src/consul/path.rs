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
    if key.chars().any(char::is_control) {
        return Err(format!(
            "key `{}` contains a control character; Consul rejects those",
            key.escape_debug()
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
            "", "/a", "a/", "a//b", "a/../b", ".", "a/./b", "a\nb", " a", "a ",
        ] {
            assert!(check_key(key).is_err(), "{key:?} should be refused");
        }
        for key in ["a", "service/db/leader", "a?b c#d", "ünï/cödé", "a.b/..c"] {
            assert!(check_key(key).is_ok(), "{key:?} should be accepted");
        }
    }
}
