//! The CQL subset the fake understands: clauses joined by `AND`, each one
//! of `text ~ "..."`, `title = "..."`, `type = page`, `space = KEY` or
//! `space IN ("A", "B")`. Strings are double-quoted with `\"` and `\\`
//! escapes; anything else is a syntax error (HTTP 400).

/// A parsed query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cql {
    /// Words every hit must contain (title or body).
    pub text: Option<String>,
    /// Space keys a hit must be in.
    pub spaces: Option<Vec<String>>,
    /// Content type (`page`).
    pub kind: Option<String>,
    pub title: Option<String>,
    /// A label a hit must carry.
    pub label: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Str(String),
    Op(&'static str),
}

fn tokens(input: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '"' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some('\\') => match chars.next() {
                            Some(e) => s.push(e),
                            None => return Err("unterminated escape".into()),
                        },
                        Some('"') => break,
                        Some(c) => s.push(c),
                        None => return Err("unterminated string".into()),
                    }
                }
                out.push(Token::Str(s));
            }
            '~' | '=' | '(' | ')' | ',' => {
                chars.next();
                out.push(Token::Op(match c {
                    '~' => "~",
                    '=' => "=",
                    '(' => "(",
                    ')' => ")",
                    _ => ",",
                }));
            }
            c if c.is_alphanumeric() || c == '_' || c == '-' => {
                let mut w = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_alphanumeric() || c == '_' || c == '-' {
                        w.push(c);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push(Token::Word(w));
            }
            other => return Err(format!("unexpected character `{other}`")),
        }
    }
    Ok(out)
}

fn value(t: Option<Token>) -> Result<String, String> {
    match t {
        Some(Token::Str(s)) | Some(Token::Word(s)) => Ok(s),
        other => Err(format!("expected a value, found {other:?}")),
    }
}

/// Parses `input`.
pub fn parse(input: &str) -> Result<Cql, String> {
    let mut it = tokens(input)?.into_iter().peekable();
    let mut cql = Cql::default();
    loop {
        let field = match it.next() {
            Some(Token::Word(w)) => w.to_ascii_lowercase(),
            other => return Err(format!("expected a field, found {other:?}")),
        };
        let op = it.next();
        match (field.as_str(), op) {
            ("text", Some(Token::Op("~"))) => cql.text = Some(value(it.next())?),
            ("title", Some(Token::Op("="))) => cql.title = Some(value(it.next())?),
            ("type", Some(Token::Op("="))) => cql.kind = Some(value(it.next())?),
            ("label", Some(Token::Op("="))) => cql.label = Some(value(it.next())?),
            ("space", Some(Token::Op("="))) => cql.spaces = Some(vec![value(it.next())?]),
            ("space", Some(Token::Word(w))) if w.eq_ignore_ascii_case("in") => {
                if it.next() != Some(Token::Op("(")) {
                    return Err("expected `(` after IN".into());
                }
                let mut list = Vec::new();
                loop {
                    list.push(value(it.next())?);
                    match it.next() {
                        Some(Token::Op(",")) => {}
                        Some(Token::Op(")")) => break,
                        other => return Err(format!("expected `,` or `)`, found {other:?}")),
                    }
                }
                cql.spaces = Some(list);
            }
            (f, op) => return Err(format!("unsupported clause `{f}` {op:?}")),
        }
        match it.next() {
            None => return Ok(cql),
            Some(Token::Word(w)) if w.eq_ignore_ascii_case("and") => {}
            other => return Err(format!("expected AND, found {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_subset() {
        let q = parse(r#"space IN ("ENG","HB") AND type = page AND text ~ "say \"hi\"""#).unwrap();
        assert_eq!(q.spaces, Some(vec!["ENG".into(), "HB".into()]));
        assert_eq!(q.kind.as_deref(), Some("page"));
        assert_eq!(q.text.as_deref(), Some("say \"hi\""));
        assert!(parse("text ~ \"x\" OR space = A").is_err());
        assert_eq!(parse("label = x").unwrap().label.as_deref(), Some("x"));
        assert!(parse("label ~ x").is_err());
        assert!(parse("text ~ \"open").is_err());
    }
}
