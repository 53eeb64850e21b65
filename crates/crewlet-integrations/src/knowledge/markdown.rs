//! Markdown in, page bodies out: the frontmatter and `# H1` of a source
//! file, its body rendered for a backend (Confluence storage XHTML or
//! Plane's `description_html`), and page HTML turned back into plain text
//! for snippets.

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd, html};

/// The page format a backend stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Confluence storage format: XHTML, fenced code as the `code` macro.
    ConfluenceStorage,
    /// Plane `description_html`: plain HTML.
    PlaneHtml,
}

/// `markdown` rendered for `format`. Raw HTML in the source is kept as
/// visible text (escaped), never passed through: it may not be valid
/// XHTML, and page bodies are not the place to inject markup.
pub fn render(markdown: &str, format: Format) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut events: Vec<Event<'_>> = Vec::new();
    // A fenced block being collected for the Confluence code macro.
    let mut code: Option<(String, String)> = None;
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(Tag::CodeBlock(kind)) if format == Format::ConfluenceStorage => {
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => {
                        info.split_whitespace().next().unwrap_or("").to_owned()
                    }
                    CodeBlockKind::Indented => String::new(),
                };
                code = Some((lang, String::new()));
            }
            Event::Text(t) if code.is_some() => {
                if let Some((_, text)) = code.as_mut() {
                    text.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) if code.is_some() => {
                if let Some((lang, text)) = code.take() {
                    events.push(Event::Html(code_macro(&lang, &text).into()));
                }
            }
            Event::Html(raw) | Event::InlineHtml(raw) => events.push(Event::Text(raw)),
            other => events.push(other),
        }
    }
    let mut out = String::with_capacity(markdown.len() * 3 / 2);
    html::push_html(&mut out, events.into_iter());
    out
}

/// Confluence's `code` macro around `text` (CDATA, with `]]>` split so it
/// cannot end the section early).
fn code_macro(lang: &str, text: &str) -> String {
    let mut out = String::from(r#"<ac:structured-macro ac:name="code">"#);
    let lang: String = lang
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+'))
        .collect();
    if !lang.is_empty() {
        out.push_str(&format!(
            r#"<ac:parameter ac:name="language">{lang}</ac:parameter>"#
        ));
    }
    out.push_str("<ac:plain-text-body><![CDATA[");
    out.push_str(&text.replace("]]>", "]]]]><![CDATA[>"));
    out.push_str("]]></ac:plain-text-body></ac:structured-macro>\n");
    out
}

/// A source file split into its YAML frontmatter (the text between a
/// leading `---` line and the next `---` or `...` line) and the rest.
pub fn split_frontmatter(text: &str) -> (Option<&str>, &str) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (None, text);
    };
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare == "---" || bare == "..." {
            return (Some(&rest[..offset]), &rest[offset + line.len()..]);
        }
        offset += line.len();
    }
    (None, text)
}

/// The text of the first ATX `# H1` outside fenced code, and the body
/// without that line.
pub fn take_h1(body: &str) -> (Option<String>, String) {
    let mut fence: Option<&str> = None;
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        let trimmed = line.trim();
        match fence {
            Some(f) if trimmed.starts_with(f) => fence = None,
            Some(_) => {}
            None if trimmed.starts_with("```") => fence = Some("```"),
            None if trimmed.starts_with("~~~") => fence = Some("~~~"),
            None => {
                let indent = line.len() - line.trim_start().len();
                if indent < 4
                    && let Some(title) = trimmed
                        .strip_prefix("# ")
                        .or_else(|| (trimmed == "#").then_some(""))
                {
                    let title = title.trim().trim_end_matches('#').trim().to_owned();
                    let mut rest = String::with_capacity(body.len());
                    rest.push_str(&body[..offset]);
                    // Blank lines right after the heading go with it.
                    rest.push_str(body[offset + line.len()..].trim_start_matches(['\n', '\r']));
                    let title = (!title.is_empty()).then_some(title);
                    return (title, rest.trim_start_matches(['\n', '\r']).to_owned());
                }
            }
        }
        offset += line.len();
    }
    (None, body.to_owned())
}

/// Plain text of page HTML (Confluence storage or view format, Plane
/// HTML): tags dropped (block tags and line breaks become a space), CDATA
/// kept as text, common entities decoded, whitespace collapsed.
pub fn html_to_text(html: &str) -> String {
    let html = html.replace("<![CDATA[", "").replace("]]>", "");
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match (in_tag, c) {
            (false, '<') => in_tag = true,
            (true, '>') => {
                // Every tag boundary separates words: `<p>a</p><p>b</p>`
                // must not read as `ab`.
                out.push(' ');
                in_tag = false;
            }
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    let decoded = decode_entities(&out);
    decoded.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Plain text of page HTML with its lines kept, for a reader that is a
/// model: block tags and `<br>` end lines, headings keep their `#`s, list
/// items start with `- `, CDATA is kept as text, entities are decoded,
/// trailing spaces and runs of blank lines are dropped.
pub fn html_to_lines(html: &str) -> String {
    let html = html.replace("<![CDATA[", "").replace("]]>", "");
    let mut out = String::with_capacity(html.len());
    let mut rest = html.as_str();
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        let Some(gt) = rest[lt..].find('>') else {
            break;
        };
        let tag = &rest[lt + 1..lt + gt];
        let closing = tag.starts_with('/');
        let name = tag
            .trim_start_matches('/')
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        match name.as_str() {
            "br" => out.push('\n'),
            "li" if !closing => out.push_str("\n- "),
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" if !closing => {
                let level = usize::from(name.as_bytes()[1] - b'0');
                out.push('\n');
                out.push_str(&"#".repeat(level));
                out.push(' ');
            }
            "p"
            | "div"
            | "pre"
            | "ul"
            | "ol"
            | "li"
            | "tr"
            | "table"
            | "blockquote"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "ac:structured-macro" => out.push('\n'),
            "td" | "th" => out.push(' '),
            _ => {}
        }
        rest = &rest[lt + gt + 1..];
    }
    if !rest.contains('<') {
        out.push_str(rest);
    }
    let decoded = decode_entities(&out);
    let mut lines: Vec<&str> = Vec::new();
    for line in decoded.lines().map(str::trim_end) {
        if line.is_empty() && lines.last().is_none_or(|l| l.is_empty()) {
            continue;
        }
        lines.push(line);
    }
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.join("\n")
}

pub(crate) fn decode_entities(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let end = after.find(';').filter(|&e| e <= 10);
        let decoded = end.and_then(|e| entity(&after[1..e]));
        match (end, decoded) {
            (Some(e), Some(c)) => {
                out.push(c);
                rest = &after[e + 1..];
            }
            _ => {
                out.push('&');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn entity(name: &str) -> Option<char> {
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        "nbsp" => Some(' '),
        _ => {
            let num = name.strip_prefix('#')?;
            let code = match num.strip_prefix(['x', 'X']) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => num.parse().ok()?,
            };
            char::from_u32(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_h1_and_rendering() {
        let (fm, body) = split_frontmatter("---\ntrigger:\n  tool: x\n---\n# Hi\ntext\n");
        assert_eq!(fm, Some("trigger:\n  tool: x\n"));
        assert_eq!(body, "# Hi\ntext\n");
        assert_eq!(split_frontmatter("# No\n").0, None);
        let (title, rest) = take_h1("```\n# not a title\n```\n# Title #\n\nBody\n");
        assert_eq!(title.as_deref(), Some("Title"));
        assert_eq!(rest, "```\n# not a title\n```\nBody\n");
        let storage = render(
            "Hello *there* <b>x</b>\n\n```rust\nlet a = \"]]>\";\n```\n",
            Format::ConfluenceStorage,
        );
        assert!(storage.contains("<em>there</em>"), "{storage}");
        assert!(storage.contains("&lt;b&gt;x&lt;/b&gt;"), "{storage}");
        assert!(storage.contains(r#"<ac:parameter ac:name="language">rust</ac:parameter>"#));
        assert!(storage.contains("]]]]><![CDATA[>"), "{storage}");
        let plane = render("```\ncode\n```\n", Format::PlaneHtml);
        assert!(plane.contains("<pre><code>code"), "{plane}");
        assert_eq!(
            html_to_text("<p>a&amp;b</p><p>c&#x41;&unknown;</p>"),
            "a&b cA&unknown;"
        );
    }
}
