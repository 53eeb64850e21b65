//! The order of the diary candidate pool: which rows the relevance filter
//! reads first, and which ones `hybrid_candidates` puts at the top.
//!
//! The pool's members are fixed by the hybrid rule (vector top-K union
//! recency top-K); this orders them by reciprocal rank fusion of three
//! views of the same rows:
//! - meaning: the vector rank (cosine to the trigger);
//! - words: BM25 of the trigger's words over the pool's rows, which catches
//!   names, ids and jargon that a small embedding model blurs (`Priya`,
//!   `PAY-482`, `pnpm`);
//! - age: the recency rank, weighted lightly, so a fresh situational fact
//!   ("the sprint is about ...") is not buried under older look-alikes.
//!
//! A row absent from a view gets nothing from it. Pure and deterministic:
//! ties keep the vector-then-recency order.

use std::collections::{HashMap, HashSet};

use crewlet_memory::{DiaryEntry, Scored};

/// How much each view counts, and the fusion constant (smaller: the top
/// ranks of a view matter more). The defaults are the best of a sweep on
/// the recall fixture (`tests/recall.rs`): recall@8 0.655 with the vector
/// order alone, 0.750 fused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolWeights {
    pub vector: f64,
    pub lexical: f64,
    pub recency: f64,
    pub k: f64,
}

impl Default for PoolWeights {
    fn default() -> Self {
        Self {
            vector: 1.0,
            lexical: 1.0,
            recency: 0.5,
            k: 10.0,
        }
    }
}

/// Words too common to say anything about relevance.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "an", "and", "any", "are", "as", "at", "be", "been", "before",
    "but", "by", "can", "could", "did", "do", "does", "for", "from", "get", "had", "has", "have",
    "he", "her", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my",
    "no", "not", "now", "of", "on", "one", "or", "our", "out", "she", "should", "so", "some",
    "that", "the", "their", "them", "then", "there", "they", "this", "to", "up", "us", "was", "we",
    "were", "what", "when", "where", "which", "who", "why", "will", "with", "would", "you", "your",
];

/// Lower-case word stems: split on anything but letters, digits and `_`,
/// stopwords and one-letter words dropped, a plural or verb ending cut.
pub(crate) fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.chars().count() > 1)
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

fn stem(w: &str) -> String {
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(base) = w.strip_suffix(suffix)
            && base.chars().count() >= 3
            && !w.ends_with("ss")
        {
            return base.to_owned();
        }
    }
    w.to_owned()
}

/// BM25 of `query` over `docs` (IDF over the docs themselves).
fn bm25(query: &[String], docs: &[Vec<String>]) -> Vec<f64> {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;
    let n = docs.len() as f64;
    if docs.is_empty() {
        return Vec::new();
    }
    let avg = docs.iter().map(Vec::len).sum::<usize>() as f64 / n;
    let unique: HashSet<&String> = query.iter().collect();
    let df: HashMap<&String, f64> = unique
        .iter()
        .map(|t| (*t, docs.iter().filter(|d| d.contains(t)).count() as f64))
        .collect();
    docs.iter()
        .map(|d| {
            let len = d.len() as f64;
            unique
                .iter()
                .map(|t| {
                    let tf = d.iter().filter(|w| w == t).count() as f64;
                    if tf == 0.0 {
                        return 0.0;
                    }
                    let df = df.get(t).copied().unwrap_or(0.0);
                    let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg.max(1.0)))
                })
                .sum()
        })
        .collect()
}

/// The pool: vector hits, then recent rows not already in, deduplicated and
/// cut to `cap`, then ordered by the fused rank.
pub fn rank_candidates(
    query_text: &str,
    similar: Vec<Scored<DiaryEntry>>,
    recent: Vec<DiaryEntry>,
    cap: usize,
    weights: PoolWeights,
) -> Vec<DiaryEntry> {
    let mut seen = HashSet::new();
    let mut vector_rank: HashMap<uuid::Uuid, usize> = HashMap::new();
    let mut recency_rank: HashMap<uuid::Uuid, usize> = HashMap::new();
    for (i, e) in recent.iter().enumerate() {
        recency_rank.insert(e.id, i + 1);
    }
    let mut pool: Vec<DiaryEntry> = Vec::new();
    for (i, s) in similar.into_iter().enumerate() {
        vector_rank.insert(s.item.id, i + 1);
        if seen.insert(s.item.id) {
            pool.push(s.item);
        }
    }
    for e in recent {
        if seen.insert(e.id) {
            pool.push(e);
        }
    }
    pool.truncate(cap);

    let query = terms(query_text);
    let docs: Vec<Vec<String>> = pool.iter().map(|e| terms(&e.content)).collect();
    let lexical = bm25(&query, &docs);
    let mut by_words: Vec<usize> = (0..pool.len()).filter(|i| lexical[*i] > 0.0).collect();
    by_words.sort_by(|a, b| lexical[*b].total_cmp(&lexical[*a]));
    let mut lexical_rank: HashMap<usize, usize> = HashMap::new();
    for (r, i) in by_words.into_iter().enumerate() {
        lexical_rank.insert(i, r + 1);
    }

    let rrf =
        |rank: Option<usize>, weight: f64| rank.map_or(0.0, |r| weight / (weights.k + r as f64));
    let mut scored: Vec<(f64, usize, DiaryEntry)> = pool
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let score = rrf(vector_rank.get(&e.id).copied(), weights.vector)
                + rrf(lexical_rank.get(&i).copied(), weights.lexical)
                + rrf(recency_rank.get(&e.id).copied(), weights.recency);
            (score, i, e)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, _, e)| e).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use crewlet_core::AgentId;
    use crewlet_memory::DiaryKind;

    fn entry(content: &str) -> DiaryEntry {
        DiaryEntry {
            id: uuid::Uuid::now_v7(),
            agent_id: AgentId::for_seat("T", "eng"),
            kind: DiaryKind::Long,
            content: content.into(),
            ttl_until: None,
            created_at: Utc::now(),
        }
    }

    #[test]
    fn terms_drop_stopwords_and_endings() {
        assert_eq!(
            terms("Who's carrying the pagers for PAY-482?"),
            ["carry", "pager", "pay", "482"]
        );
        assert_eq!(terms("the class passes"), ["class", "pass"]);
    }

    #[test]
    fn a_named_row_rises_above_vague_look_alikes() {
        let a = entry("Deploys happen after review.");
        let b = entry("Release notes go in the wiki.");
        let priya = entry("Priya is on vacation until the 12th.");
        let similar = vec![
            Scored {
                item: a.clone(),
                score: 0.5,
            },
            Scored {
                item: b.clone(),
                score: 0.49,
            },
            Scored {
                item: priya.clone(),
                score: 0.3,
            },
        ];
        let ranked = rank_candidates(
            "can Priya approve it?",
            similar,
            vec![],
            100,
            PoolWeights::default(),
        );
        assert_eq!(ranked[0].id, priya.id);
        assert_eq!(ranked.len(), 3);
        // Nothing in common with the words: the vector order stands.
        let ranked = rank_candidates(
            "zzz",
            vec![
                Scored {
                    item: a.clone(),
                    score: 0.5,
                },
                Scored {
                    item: b.clone(),
                    score: 0.4,
                },
            ],
            vec![],
            100,
            PoolWeights::default(),
        );
        assert_eq!(
            ranked.iter().map(|e| e.id).collect::<Vec<_>>(),
            [a.id, b.id]
        );
    }
}
