//! URL handling as Go's `net/url` and `net/http` do it, since Consul sees
//! keys and parameters through them: percent-decoding of the path, query
//! parsing (`+` is a space, a bad escape spoils the whole query), the
//! `Values.Encode` form that ends up in "Conflicting flags: ..." and the
//! ServeMux path cleaning that answers `//` with a redirect.

/// Decodes `%XX` escapes; `plus_is_space` for query components.
pub fn unescape(s: &str, plus_is_space: bool) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hi = hex(*b.get(i + 1)?)?;
                let lo = hex(*b.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Some(out)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// A parsed query string, in order.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Go's `url.ParseQuery`. The flag says whether any pair was malformed
    /// (bad escape, `;`): Consul then refuses the request outright.
    pub fn parse(raw: &str) -> (Query, bool) {
        let mut pairs = Vec::new();
        let mut bad = false;
        for part in raw.split('&') {
            if part.contains(';') {
                bad = true;
                continue;
            }
            if part.is_empty() {
                continue;
            }
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            match (unescape(k, true), unescape(v, true)) {
                (Some(k), Some(v)) => pairs.push((
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )),
                _ => bad = true,
            }
        }
        (Query { pairs }, bad)
    }

    /// Present at all, with or without a value (`?recurse`).
    pub fn has(&self, key: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == key)
    }

    /// `Values.Get`: the first value, `""` for a bare flag.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `Values.Encode`: keys sorted, each value `QueryEscape`d.
    pub fn encode(&self) -> String {
        let mut keys: Vec<&str> = self.pairs.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut parts = Vec::new();
        for k in keys {
            for (_, v) in self.pairs.iter().filter(|(pk, _)| pk == k) {
                parts.push(format!("{}={}", query_escape(k), query_escape(v)));
            }
        }
        parts.join("&")
    }
}

/// Go's `url.QueryEscape`.
pub fn query_escape(s: &str) -> String {
    let mut out = String::new();
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Escapes a decoded path for a `Location` header, keeping `/`.
pub fn path_escape(s: &str) -> String {
    let mut out = String::new();
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => out.push(char::from(b)),
            b'-' | b'_' | b'.' | b'~' | b'/' | b'$' | b'&' | b'+' | b',' | b':' | b';' | b'='
            | b'@' => out.push(char::from(b)),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// net/http's `cleanPath`: `path.Clean` that keeps a trailing slash.
pub fn clean_path(p: &str) -> String {
    if p.is_empty() {
        return "/".to_string();
    }
    let rooted = if p.starts_with('/') {
        p.to_string()
    } else {
        format!("/{p}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for seg in rooted.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let mut cleaned = format!("/{}", parts.join("/"));
    if rooted.ends_with('/') && cleaned != "/" {
        cleaned.push('/');
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_go() {
        let (q, bad) = Query::parse("recurse&index=12&wait=1s&x=a+b%3F");
        assert!(!bad);
        assert!(q.has("recurse"));
        assert_eq!(q.get("recurse"), Some(""));
        assert_eq!(q.get("index"), Some("12"));
        assert_eq!(q.get("x"), Some("a b?"));
        assert_eq!(q.get("nope"), None);
        assert!(Query::parse("a=%zz").1);
        assert!(Query::parse("a=1;b=2").1);
    }

    #[test]
    fn encodes_sorted() {
        let (q, _) = Query::parse("cas=0&acquire=x");
        assert_eq!(q.encode(), "acquire=x&cas=0");
        let (q, _) = Query::parse("recurse&cas=5");
        assert_eq!(q.encode(), "cas=5&recurse=");
    }

    #[test]
    fn cleans_like_servemux() {
        assert_eq!(clean_path("/v1/kv/a//b"), "/v1/kv/a/b");
        assert_eq!(clean_path("/v1/kv/a/./b/"), "/v1/kv/a/b/");
        assert_eq!(clean_path("/v1/kv/a/../b"), "/v1/kv/b");
        assert_eq!(clean_path("/v1/kv/t/"), "/v1/kv/t/");
        assert_eq!(clean_path("/"), "/");
    }

    #[test]
    fn unescapes_paths() {
        assert_eq!(unescape("t/a%3Fb%20c%23d", false).unwrap(), b"t/a?b c#d");
        assert_eq!(unescape("a+b", false).unwrap(), b"a+b");
        assert!(unescape("%4", false).is_none());
    }
}
