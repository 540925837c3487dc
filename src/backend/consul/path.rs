//! Keys become URL path segments here, and only here. Every segment is
//! percent-encoded, so a key can never smuggle in a query parameter; and keys
//! Consul would mangle are refused before anything is sent.

use reqwest::Url;

/// Why a key is refused: lockrun's one rule for keys, the same on every
/// backend ([`crate::key::check`]).
pub fn check_key(key: &str) -> Result<(), String> {
    crate::key::check(key)
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
}
