//! Which seat a model call is made for.
//!
//! HTTP providers do not care; a CLI keeps state on disk, so the cli-agent
//! provider runs each seat in its own home and must know the caller. The
//! turn engine binds the seat around a turn with [`with_seat`]; a call made
//! outside any (a learning job, `crewlet llm doctor`) runs as
//! [`ENGINE_SEAT`], a workspace of its own, never a shared fallback.

use std::future::Future;

/// The seat of calls made outside a turn.
pub const ENGINE_SEAT: &str = "_engine";

/// Longest seat directory name, so nested CLI paths stay far from `PATH_MAX`.
const MAX_SEAT_LEN: usize = 64;

tokio::task_local! {
    static SEAT: String;
}

/// Runs `fut` with its model calls attributed to `seat` (an agent handle).
pub async fn with_seat<F: Future>(seat: impl Into<String>, fut: F) -> F::Output {
    SEAT.scope(seat.into(), fut).await
}

/// The seat of the current task, sanitised for use as a directory name.
pub fn current_seat() -> String {
    SEAT.try_with(|s| sanitize(s))
        .unwrap_or_else(|_| ENGINE_SEAT.to_owned())
}

/// `name` as a safe single path component: lower-case `[a-z0-9._-]`, other
/// runs folded to `-`, never `.`/`..`, at most 64 characters.
pub fn sanitize(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed: String = out
        .trim_matches(|c| c == '-' || c == '.')
        .chars()
        .take(MAX_SEAT_LEN)
        .collect();
    if trimmed.is_empty() {
        ENGINE_SEAT.to_owned()
    } else {
        trimmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_escape_their_directory() {
        assert_eq!(sanitize("Sarah Chen"), "sarah-chen");
        assert_eq!(sanitize("../../etc"), "etc");
        assert_eq!(sanitize(".."), ENGINE_SEAT);
        assert_eq!(sanitize("a/b"), "a-b");
        assert_eq!(sanitize(&"x".repeat(200)).len(), 64);
    }

    #[tokio::test]
    async fn the_seat_is_bound_for_the_future_only() {
        assert_eq!(current_seat(), ENGINE_SEAT);
        let inside = with_seat("CTO", async { current_seat() }).await;
        assert_eq!(inside, "cto");
        assert_eq!(current_seat(), ENGINE_SEAT);
    }
}
