//! Text shown to people, on a terminal or in a log: control characters written as escapes, so
//! that a name read from the kernel or the API server (a foreign chain, an endpoint's node
//! name) cannot clear the operator's screen, move the cursor, or forge a line of its own.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal or a log as it is: C0 controls (line breaks too),
/// DEL, C1 controls (a UTF-8 terminal may still take U+009B as a CSI), the line and paragraph
/// separators (U+2028, U+2029: a line break to JavaScript, to some viewers and aggregators)
/// and the bidirectional controls that reorder what is shown ("Trojan Source").
pub fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `s` with each character a terminal would act on written as an escape (`\x1b`, `\n`,
/// `\u{202e}`); `s` itself, borrowed, when it has none.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unprintable) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if unprintable(c) && u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if unprintable(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Appends `line` to `out`, made printable, and then a line break: a text built line by line
/// keeps its own breaks, and a break inside a field shows as `\n`.
pub fn push_line(out: &mut String, line: &str) {
    out.push_str(&printable(line));
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_the_rest_kept() {
        assert!(matches!(printable("web/ns:http 10.0.0.1 → ü"), Cow::Borrowed(_)));
        assert_eq!(printable("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(printable("x\ny\r\tz\x7f"), "x\\ny\\r\\tz\\x7f");
        assert_eq!(printable("\u{9b}31m"), "\\u{9b}31m", "a C1 CSI");
        assert_eq!(printable("abc\u{202e}fed"), "abc\\u{202e}fed", "a right-to-left override");
        let mut out = String::new();
        push_line(&mut out, "chain a\nforged");
        push_line(&mut out, "next");
        assert_eq!(out, "chain a\\nforged\nnext\n");
    }

    /// Issue 34: a name with a line separator forged a line of its own in the text log.
    #[test]
    fn line_separators_and_every_bidi_control_are_escaped() {
        let separators = "ns\u{2028}[forged]/web\u{2029}\u{61c}\u{200e}\u{2066}\u{2069}";
        assert_eq!(printable(separators), "ns\\u{2028}[forged]/web\\u{2029}\\u{61c}\\u{200e}\\u{2066}\\u{2069}");
        assert!(matches!(printable("\u{2027}\u{202f}\u{2065}\u{206a}\u{a0}"), Cow::Borrowed(_)), "their neighbours");
    }
}
