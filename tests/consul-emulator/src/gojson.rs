//! The two places where Go's `encoding/json` shows through Consul's API:
//! the syntax-error texts a bad request body earns (`Request decode failed:
//! invalid character 'n' looking for beginning of object key string`), and
//! the output escaping (`<`, `>`, `&` as `\u003c`...).

use crate::duration::push_quoted_char;
use serde::Serialize;

/// Go's `quoteChar`: how its scanner names the byte it choked on. The
/// scanner works on bytes, so a byte of a multi-byte character is shown as
/// the Latin-1 character with that number, as Go does.
fn quote_byte(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        c => {
            let mut s = String::from("'");
            push_quoted_char(&mut s, char::from(c), '\'');
            s.push('\'');
            s
        }
    }
}

fn invalid(c: u8, context: &str) -> String {
    format!("invalid character {} {}", quote_byte(c), context)
}

const UNEXPECTED_EOF: &str = "unexpected EOF";

/// Finds the first JSON value in `input` the way `json.Decoder.Decode` reads
/// it: leading whitespace skipped, anything after the value ignored. Returns
/// the value's byte range, or the error text Go would give.
pub fn first_value(input: &[u8]) -> Result<std::ops::Range<usize>, String> {
    let mut p = Parser { s: input, i: 0 };
    p.skip_ws();
    if p.i == input.len() {
        return Err("EOF".to_string());
    }
    let start = p.i;
    p.value()?;
    Ok(start..p.i)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn next(&mut self) -> Result<u8, String> {
        let c = self.peek().ok_or_else(|| UNEXPECTED_EOF.to_string())?;
        self.i += 1;
        Ok(c)
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }

    fn value(&mut self) -> Result<(), String> {
        self.skip_ws();
        let c = self.next()?;
        match c {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(c),
            b't' => self.literal(b"rue", "true"),
            b'f' => self.literal(b"alse", "false"),
            b'n' => self.literal(b"ull", "null"),
            c => Err(invalid(c, "looking for beginning of value")),
        }
    }

    fn object(&mut self) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            let c = self.next()?;
            if c != b'"' {
                return Err(invalid(c, "looking for beginning of object key string"));
            }
            self.string()?;
            self.skip_ws();
            let c = self.next()?;
            if c != b':' {
                return Err(invalid(c, "after object key"));
            }
            self.value()?;
            self.skip_ws();
            match self.next()? {
                b',' => continue,
                b'}' => return Ok(()),
                c => return Err(invalid(c, "after object key:value pair")),
            }
        }
    }

    fn array(&mut self) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.value()?;
            self.skip_ws();
            match self.next()? {
                b',' => continue,
                b']' => return Ok(()),
                c => return Err(invalid(c, "after array element")),
            }
        }
    }

    fn string(&mut self) -> Result<(), String> {
        loop {
            match self.next()? {
                b'"' => return Ok(()),
                b'\\' => match self.next()? {
                    b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => {}
                    b'u' => {
                        for _ in 0..4 {
                            let c = self.next()?;
                            if !c.is_ascii_hexdigit() {
                                return Err(invalid(c, "in \\u hexadecimal character escape"));
                            }
                        }
                    }
                    c => return Err(invalid(c, "in string escape code")),
                },
                c if c < 0x20 => return Err(invalid(c, "in string literal")),
                _ => {}
            }
        }
    }

    fn number(&mut self, first: u8) -> Result<(), String> {
        let mut c = first;
        if c == b'-' {
            c = self.next()?;
            if !c.is_ascii_digit() {
                return Err(invalid(c, "in numeric literal"));
            }
        }
        if c != b'0' {
            self.digits();
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            let c = self.next()?;
            if !c.is_ascii_digit() {
                return Err(invalid(c, "after decimal point in numeric literal"));
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            let mut c = self.next()?;
            if c == b'+' || c == b'-' {
                c = self.next()?;
            }
            if !c.is_ascii_digit() {
                return Err(invalid(c, "in exponent of numeric literal"));
            }
            self.digits();
        }
        Ok(())
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
    }

    fn literal(&mut self, rest: &[u8], name: &str) -> Result<(), String> {
        for &want in rest {
            let c = self.next()?;
            if c != want {
                return Err(invalid(
                    c,
                    &format!("in literal {name} (expecting {})", quote_byte(want)),
                ));
            }
        }
        Ok(())
    }
}

/// Go's name for a JSON value's kind in "cannot unmarshal X into ..." errors.
pub fn kind_name(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Serialises like Go's `json.Marshal` (or `MarshalIndent` with four spaces
/// and a newline, Consul's `?pretty`). Go escapes `<`, `>`, `&`, U+2028 and
/// U+2029 inside strings; those characters cannot occur in JSON outside a
/// string, so replacing them in the whole text is safe.
pub fn to_vec<T: Serialize>(value: &T, pretty: bool) -> Vec<u8> {
    let text = if pretty {
        let mut buf = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        // Our output types are plain structs, vectors and strings, which
        // cannot fail to serialise.
        if value.serialize(&mut ser).is_err() {
            buf.clear();
        }
        buf.push(b'\n');
        String::from_utf8_lossy(&buf).into_owned()
    } else {
        serde_json::to_string(value).unwrap_or_default()
    };
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> String {
        first_value(s.as_bytes()).unwrap_err()
    }

    #[test]
    fn syntax_errors_read_like_go() {
        assert_eq!(
            err("{not json"),
            "invalid character 'n' looking for beginning of object key string"
        );
        assert_eq!(err(""), "EOF");
        assert_eq!(err("  \n"), "EOF");
        assert_eq!(err("{"), "unexpected EOF");
        assert_eq!(err("{\"a\" 1}"), "invalid character '1' after object key");
        assert_eq!(
            err("{\"a\":1 \"b\":2}"),
            "invalid character '\"' after object key:value pair"
        );
        assert_eq!(err("[1 2]"), "invalid character '2' after array element");
        assert_eq!(
            err("x"),
            "invalid character 'x' looking for beginning of value"
        );
        assert_eq!(
            err("tru "),
            "invalid character ' ' in literal true (expecting 'e')"
        );
        assert_eq!(err("\"a\nb\""), "invalid character '\\n' in string literal");
        assert_eq!(err("-x"), "invalid character 'x' in numeric literal");
        assert_eq!(
            err("{'a':1}"),
            "invalid character '\\'' looking for beginning of object key string"
        );
    }

    #[test]
    fn reads_only_the_first_value() {
        assert_eq!(first_value(b" {} trailing"), Ok(1..3));
        let doc = b"{\"a\":[1,2.5e3,null,true]}";
        assert_eq!(first_value(doc), Ok(0..doc.len()));
    }

    #[test]
    fn escapes_like_go() {
        let out = to_vec(&"<a&b>", false);
        assert_eq!(out, b"\"\\u003ca\\u0026b\\u003e\"");
        assert_eq!(to_vec(&vec![1, 2], true), b"[\n    1,\n    2\n]\n");
    }
}
