//! Who a piece of text addresses, in each source's own mention syntax.

use super::json::push_unique;

fn is_handle_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// `@login` handles in free text (GitHub, GitLab, Plane): not inside an email
/// address, trailing punctuation dropped, `@org/team` kept whole. Order of
/// first appearance, case-insensitively unique.
pub(crate) fn at_handles(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '@' {
            i += 1;
            continue;
        }
        let preceded_by_word = i > 0 && (is_handle_char(chars[i - 1]) || chars[i - 1] == '/');
        let start = i + 1;
        let mut end = start;
        while end < chars.len() && is_handle_char(chars[end]) {
            end += 1;
        }
        // `@org/team`
        if end < chars.len() && chars[end] == '/' {
            let mut team_end = end + 1;
            while team_end < chars.len() && is_handle_char(chars[team_end]) {
                team_end += 1;
            }
            if team_end > end + 1 {
                end = team_end;
            }
        }
        let raw: String = chars[start..end].iter().collect();
        let handle = raw.trim_end_matches(['.', '-', '_']);
        if !preceded_by_word && handle.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            push_unique(&mut out, handle.to_string());
        }
        i = end.max(i + 1);
    }
    out
}

/// Slack user mentions `<@U123>` and `<@U123|name>`: the user ids.
pub(crate) fn slack_users(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find("<@") {
        rest = &rest[pos + 2..];
        let Some(close) = rest.find('>') else { break };
        let inner = &rest[..close];
        let id = inner.split('|').next().unwrap_or_default();
        if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            push_unique(&mut out, id.to_string());
        }
        rest = &rest[close + 1..];
    }
    out
}

/// Jira wiki-markup mentions `[~accountid:abc]` (Cloud) and `[~name]` (Server).
pub(crate) fn jira_wiki(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(pos) = rest.find("[~") {
        rest = &rest[pos + 2..];
        let Some(close) = rest.find(']') else { break };
        let inner = rest[..close].trim();
        let id = inner.strip_prefix("accountid:").unwrap_or(inner);
        if !id.is_empty() && !id.contains(char::is_whitespace) {
            push_unique(&mut out, id.to_string());
        }
        rest = &rest[close + 1..];
    }
    out
}

/// Values of `attr="..."` in an HTML/XML fragment, e.g. Plane's
/// `entity_identifier` on `<mention-component>` or Confluence's `ri:account-id`.
pub(crate) fn attribute_values(html: &str, attr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let needle = format!("{attr}=");
    let mut rest = html;
    while let Some(pos) = rest.find(&needle) {
        rest = &rest[pos + needle.len()..];
        let Some(quote) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            continue;
        };
        rest = &rest[1..];
        let Some(close) = rest.find(quote) else { break };
        push_unique(&mut out, rest[..close].to_string());
        rest = &rest[close + 1..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_handles_skip_emails_and_trailing_punctuation() {
        assert_eq!(
            at_handles("@alice please ask @Bob-2. cc bob@example.com, @bob-2 and (@carol_x)!"),
            ["alice", "Bob-2", "carol_x"]
        );
        assert_eq!(at_handles("ping @acme/reviewers now"), ["acme/reviewers"]);
        assert_eq!(
            at_handles("@ alone, @-bad, trailing @"),
            Vec::<String>::new()
        );
        assert_eq!(at_handles("héllo @émile @ok"), ["ok"]);
    }

    #[test]
    fn slack_user_ids() {
        assert_eq!(
            slack_users("<@U01ABC> hi <@W2|wendy> and <@U01ABC> <#C1|general> <@bad id>"),
            ["U01ABC", "W2"]
        );
        assert!(slack_users("<@unterminated").is_empty());
    }

    #[test]
    fn jira_wiki_mentions() {
        assert_eq!(
            jira_wiki("[~accountid:5b10ac8d82e05b22cc7d4ef5] and [~jsmith] [~ bad one]"),
            ["5b10ac8d82e05b22cc7d4ef5", "jsmith"]
        );
    }

    #[test]
    fn attributes() {
        let html = r#"<mention-component entity_identifier="u-1" entity_name="user_mention"></mention-component> <mention-component entity_identifier='u-2'>"#;
        assert_eq!(attribute_values(html, "entity_identifier"), ["u-1", "u-2"]);
        assert!(attribute_values("x entity_identifier=bare", "entity_identifier").is_empty());
    }
}
