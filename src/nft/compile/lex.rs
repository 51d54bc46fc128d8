//! Splits the text the templates render into tokens: words (names, numbers, addresses with
//! their ports and prefixes), quoted strings, and the punctuation nftables' grammar uses.
//! A `:` or `.` stands alone only between spaces (`k : v`, `a . b`); inside a word it is
//! part of an address (`fd00::1`, `10.0.0.1:80`).

use super::CompileError;

/// One token, with the line it was on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// A bare word: a keyword, name, number, address, prefix or `[v6]:port`.
    Word(String),
    /// A double-quoted string, without its quotes.
    Str(String),
    /// `{`
    Open,
    /// `}`
    Close,
    /// `;` or the end of a line: both end a statement.
    End,
    /// `,`
    Comma,
    /// A `:` standing alone.
    Colon,
    /// A `.` standing alone (concatenation).
    Dot,
    /// `@`, before a set's name.
    At,
    /// `!=`
    NotEq,
    /// `==`
    EqEq,
    /// `&`
    And,
}

/// Tokens of `text`, each with its 1-based line number; comments (`#` to the end of the
/// line) are dropped.
pub fn tokens(text: &str) -> Result<Vec<(Token, usize)>, CompileError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        line_tokens(line, n + 1, &mut out)?;
        out.push((Token::End, n + 1));
    }
    Ok(out)
}

fn line_tokens(line: &str, n: usize, out: &mut Vec<(Token, usize)>) -> Result<(), CompileError> {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let alone = |j: usize| bytes.get(j).is_none_or(|b| b.is_ascii_whitespace());
        let token = match c {
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            b'#' => return Ok(()),
            b'"' => {
                let end = line[i + 1..].find('"').ok_or_else(|| CompileError::at(n, "a string without its end"))?;
                let s = line[i + 1..i + 1 + end].to_string();
                i += end + 2;
                out.push((Token::Str(s), n));
                continue;
            }
            b'{' => Token::Open,
            b'}' => Token::Close,
            b';' => Token::End,
            b',' => Token::Comma,
            b'@' => Token::At,
            b'&' => Token::And,
            b'!' if bytes.get(i + 1) == Some(&b'=') => {
                i += 1;
                Token::NotEq
            }
            b'=' if bytes.get(i + 1) == Some(&b'=') => {
                i += 1;
                Token::EqEq
            }
            b':' if alone(i + 1) => Token::Colon,
            b'.' if alone(i + 1) && (i == 0 || alone(i - 1)) => Token::Dot,
            _ => {
                let start = i;
                while i < bytes.len() && !matches!(bytes[i], b' ' | b'\t' | b'\r' | b'{' | b'}' | b';' | b',' | b'"') {
                    i += 1;
                }
                out.push((Token::Word(line[start..i].to_string()), n));
                continue;
            }
        };
        out.push((token, n));
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<Token> {
        tokens(text).unwrap().into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn addresses_keep_their_colons_and_dots_while_separators_stand_alone() {
        use Token::*;
        let w = |s: &str| Word(s.to_string());
        assert_eq!(
            words("fd00::1 . tcp . 80 : goto a, # note"),
            [w("fd00::1"), Dot, w("tcp"), Dot, w("80"), Colon, w("goto"), w("a"), Comma, End]
        );
        assert_eq!(
            words("dnat ip6 to [fd00::1]:80; meta mark & 0x4000 != 0 comment \"a b\""),
            [
                w("dnat"),
                w("ip6"),
                w("to"),
                w("[fd00::1]:80"),
                End,
                w("meta"),
                w("mark"),
                And,
                w("0x4000"),
                NotEq,
                w("0"),
                w("comment"),
                Str("a b".into()),
                End
            ]
        );
        assert_eq!(words("flags dynamic,timeout")[2], Comma);
        assert!(tokens("comment \"unterminated").is_err());
    }
}
