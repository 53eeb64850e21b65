//! "Did you mean" suggestions: the candidate within a few edits of a word.

/// The candidate nearest to `word` when it is close enough to be a typo.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).min(3);
    if limit == 0 {
        return None;
    }
    let word: Vec<char> = word.to_lowercase().chars().collect();
    let mut lower: Vec<char> = Vec::new();
    let mut rows: Vec<usize> = Vec::new();
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        // Cheap ruling out first: the distance is at least the difference
        // in length (exact for ASCII, where lower case keeps the length).
        if c.is_ascii() && c.len().abs_diff(word.len()) > limit {
            continue;
        }
        lower.clear();
        lower.extend(c.chars().flat_map(char::to_lowercase));
        // The first candidate at the smallest distance wins, as with `min_by_key`.
        let bound = best.map_or(limit, |(d, _)| d.saturating_sub(1));
        if let Some(d) = edit_distance(&word, &lower, bound, &mut rows)
            && best.is_none_or(|(b, _)| d < b)
        {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Edit distance counting a swap of two neighbours as one edit (optimal
/// string alignment), so `prot` is one edit from `port`; `None` when it is
/// above `limit`. Three rolling rows, and it stops as soon as every cell of
/// a row is above the limit: checking a word against a long list is cheap.
/// `rows` is scratch space, reused between calls.
fn edit_distance(a: &[char], b: &[char], limit: usize, rows: &mut Vec<usize>) -> Option<usize> {
    // The distance is at least the difference in length.
    if a.len().abs_diff(b.len()) > limit {
        return None;
    }
    let width = b.len() + 1;
    rows.clear();
    rows.resize(3 * width, 0);
    let (before, rest) = rows.split_at_mut(width);
    let (mut prev, mut cur) = rest.split_at_mut(width);
    let mut before = before;
    for (j, cell) in prev.iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        cur[0] = i;
        let mut row_min = i;
        for j in 1..width {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            cur[j] = d;
            row_min = row_min.min(d);
        }
        // A cell only grows from the rows above it (a swap reaches back two
        // rows, so both must be over the limit).
        if row_min > limit && prev.iter().min().is_some_and(|&m| m > limit) {
            return None;
        }
        // Rotate: the row before becomes the scratch for the next one.
        let scratch = before;
        before = prev;
        prev = cur;
        cur = scratch;
    }
    Some(prev[b.len()]).filter(|&d| d <= limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_get_suggestions() {
        assert_eq!(closest("handel", &["handle", "name"]), Some("handle"));
        assert_eq!(closest("zzz", &["handle", "name"]), None);
        assert_eq!(closest("prot", &["host", "port"]), Some("port"));
        assert_eq!(
            closest("Europe/Pariss", &["Europe/Prague", "Europe/Paris"]),
            Some("Europe/Paris")
        );
        // Ties go to the first candidate.
        assert_eq!(closest("nam", &["nap", "nab"]), Some("nap"));
        assert_eq!(closest("handles", &["handle", "handled"]), Some("handle"));
    }

    #[test]
    fn edit_distances() {
        let d = |a: &str, b: &str| {
            let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
            edit_distance(&a, &b, 10, &mut Vec::new())
        };
        assert_eq!(d("kitten", "sitting"), Some(3));
        assert_eq!(d("prot", "port"), Some(1));
        assert_eq!(d("", "abc"), Some(3));
        assert_eq!(d("abc", "abc"), Some(0));
        assert_eq!(d("ca", "abc"), Some(3));
        let a: Vec<char> = "abcdefgh".chars().collect();
        let b: Vec<char> = "zyxwvuts".chars().collect();
        assert_eq!(edit_distance(&a, &b, 3, &mut Vec::new()), None);
    }
}
