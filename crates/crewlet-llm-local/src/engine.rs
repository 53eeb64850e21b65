//! A loaded model and its generation loop: the prompt reuses the longest
//! cached prefix of an earlier conversation, each token is picked under the
//! answer's grammar, and text streams out as it is decoded.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use parking_lot::Mutex;
use rand::Rng;
use rand::distr::{Distribution, weighted::WeightedIndex};

use crate::LocalModelError;
use crate::gguf::GgufFile;
use crate::model::{KvCache, Weights, argmax};
use crate::template::{ChatMessage, ChatTemplate};
use crate::tokenizer::ModelTokenizer;

/// A model in memory: weights, tokenizer, template, and the caches of
/// recent conversations.
pub struct LocalModel {
    pub weights: Weights,
    pub tokenizer: Arc<ModelTokenizer>,
    pub template: ChatTemplate,
    factory: ParserFactory,
    /// Recent conversations' caches, most recently used last.
    sessions: Mutex<Vec<Session>>,
    max_sessions: usize,
    /// Tokens a prompt plus its answer may span.
    pub context: usize,
    /// Bytes of the file the weights came from.
    pub file_size: u64,
    /// Tokens generated since load, over every call (cancelled ones too).
    generated_total: AtomicU64,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("context", &self.context)
            .field("tokenizer", &self.tokenizer)
            .finish()
    }
}

/// A conversation's tokens and the cache that holds them.
struct Session {
    tokens: Vec<u32>,
    cache: KvCache,
}

/// A shared beginning shorter than this is not worth copying out of another
/// conversation.
const MIN_SHARED_PREFIX: usize = 32;

/// Tokens a tool call may take in all, past the answer's own cap.
pub const CALL_BUDGET: usize = 1024;

/// How one answer is generated.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    /// 0 (or below): always the most likely token.
    pub temperature: f32,
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model ended its turn (or the grammar was complete).
    End,
    /// `max_tokens` was reached.
    Length,
    /// The caller stopped listening.
    Cancelled,
}

/// A finished generation.
#[derive(Clone, Debug)]
pub struct Generated {
    pub text: String,
    /// Tokens generated (the end-of-turn token not counted).
    pub output_tokens: usize,
    pub prompt_tokens: usize,
    /// Prompt tokens served from a cached conversation.
    pub cached_tokens: usize,
    pub stop: StopReason,
    pub prompt_time: Duration,
    pub generate_time: Duration,
    /// Time spent computing grammar masks.
    pub constrain_time: Duration,
}

impl LocalModel {
    /// Loads the model at `path`: header checks, tokenizer, template, weights.
    pub fn load(
        path: &Path,
        context: Option<usize>,
        max_sessions: usize,
    ) -> Result<Self, LocalModelError> {
        let mut gguf = GgufFile::open(path)?;
        let tokenizer = Arc::new(ModelTokenizer::from_gguf(&gguf)?);
        let name_of = |id: Option<u32>| {
            id.and_then(|i| tokenizer.name(i))
                .unwrap_or_default()
                .to_owned()
        };
        let template = ChatTemplate::new(
            path,
            gguf.string("tokenizer.chat_template"),
            &name_of(tokenizer.bos()),
            &name_of(Some(tokenizer.eos())),
        )?;
        let weights = Weights::load(&mut gguf)?;
        let factory = ParserFactory::new_simple(&tokenizer.tok_env()).map_err(|e| {
            LocalModelError::Tokenizer {
                path: path.to_path_buf(),
                detail: format!("constrained decoding cannot use it: {e}"),
            }
        })?;
        let context = context
            .unwrap_or(weights.hyper.context)
            .min(weights.hyper.context);
        Ok(Self {
            weights,
            tokenizer,
            template,
            factory,
            sessions: Mutex::new(Vec::new()),
            max_sessions: max_sessions.max(1),
            context,
            file_size: gguf.size,
            generated_total: AtomicU64::new(0),
        })
    }

    /// The prompt tokens of a chat.
    pub fn prompt_tokens(&self, chat: &[ChatMessage]) -> Result<Vec<u32>, LocalModelError> {
        let text = self.template.render(chat)?;
        self.tokenizer.encode(&text)
    }

    /// A matcher for `grammar`, or the grammar's error.
    pub fn matcher(&self, grammar: TopLevelGrammar) -> Result<Matcher, LocalModelError> {
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| LocalModelError::Runtime(format!("the answer grammar: {e}")))?;
        Ok(Matcher::new(Ok(parser)))
    }

    /// Generates an answer to `prompt`. `on_text` gets each piece of text as
    /// it is decoded and may stop generation.
    ///
    /// The whole generation runs on a worker of the model's thread pool, so
    /// the products inside it split their rows among the pool's threads
    /// without a thread outside the pool handing each one over and sleeping
    /// until it is done (some 200 of them per token: measured, the hand-overs
    /// cost more than a third of a token's time).
    pub fn generate(
        &self,
        prompt: &[u32],
        matcher: Option<Matcher>,
        options: &GenerateOptions,
        on_text: impl FnMut(&str) -> ControlFlow<()> + Send,
    ) -> Result<Generated, LocalModelError> {
        match pool() {
            Some(pool) if rayon::current_thread_index().is_none() => {
                pool.install(|| self.generate_here(prompt, matcher, options, on_text))
            }
            _ => self.generate_here(prompt, matcher, options, on_text),
        }
    }

    fn generate_here(
        &self,
        prompt: &[u32],
        mut matcher: Option<Matcher>,
        options: &GenerateOptions,
        mut on_text: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Generated, LocalModelError> {
        if prompt.is_empty() {
            return Err(LocalModelError::Runtime("the prompt is empty".into()));
        }
        let started = Instant::now();
        let mut session = self.take_session(prompt);
        // The last prompt token always runs: its logits pick the first token.
        let keep = common_prefix(&session.tokens, prompt).min(prompt.len() - 1);
        session.tokens.truncate(keep);
        session.cache.truncate(keep);
        let result = self.run(
            &mut session,
            prompt,
            keep,
            &mut matcher,
            options,
            &mut on_text,
            started,
        );
        if result.is_err() {
            session.tokens.clear();
            session.cache.truncate(0);
        }
        self.put_session(session);
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        session: &mut Session,
        prompt: &[u32],
        cached: usize,
        matcher: &mut Option<Matcher>,
        options: &GenerateOptions,
        on_text: &mut impl FnMut(&str) -> ControlFlow<()>,
        started: Instant,
    ) -> Result<Generated, LocalModelError> {
        let mut logits = self
            .weights
            .forward(&prompt[cached..], &mut session.cache)?;
        session.tokens.extend_from_slice(&prompt[cached..]);
        let prompt_time = started.elapsed();
        let gen_started = Instant::now();
        let mut constrain_time = Duration::ZERO;
        let mut generated: Vec<u32> = Vec::new();
        let mut text_bytes: Vec<u8> = Vec::new();
        let mut sent = 0usize;
        let mut rng = rand::rng();
        let room = self.context.saturating_sub(prompt.len());
        let mut budget = options.max_tokens.min(room);
        let mut extended = false;
        let mut stop = StopReason::Length;
        while generated.len() < budget {
            let t0 = Instant::now();
            if let Some(m) = matcher.as_mut() {
                let mask = m
                    .compute_mask()
                    .map_err(|e| LocalModelError::Runtime(format!("the answer grammar: {e}")))?;
                for (id, l) in logits.iter_mut().enumerate() {
                    if !mask.is_allowed(id as u32) {
                        *l = f32::NEG_INFINITY;
                    }
                }
            } else {
                for (id, l) in logits.iter_mut().enumerate() {
                    let id = id as u32;
                    if self.tokenizer.is_special(id) && !self.tokenizer.is_stop(id) {
                        *l = f32::NEG_INFINITY;
                    }
                }
            }
            constrain_time += t0.elapsed();
            penalize_repeats(&mut logits, &generated);
            let token = pick(&logits, options.temperature, &mut rng);
            if self.tokenizer.is_stop(token) {
                stop = StopReason::End;
                break;
            }
            if let Some(m) = matcher.as_mut() {
                let t1 = Instant::now();
                m.consume_token(token)
                    .map_err(|e| LocalModelError::Runtime(format!("the answer grammar: {e}")))?;
                constrain_time += t1.elapsed();
            }
            generated.push(token);
            self.generated_total.fetch_add(1, Ordering::Relaxed);
            text_bytes.extend_from_slice(&self.tokenizer.decode_bytes(&[token]));
            let complete = utf8_complete(&text_bytes[sent..]);
            if complete > 0 {
                let piece =
                    String::from_utf8_lossy(&text_bytes[sent..sent + complete]).into_owned();
                sent += complete;
                if on_text(&piece).is_break() {
                    stop = StopReason::Cancelled;
                    break;
                }
            }
            if matcher.as_ref().is_some_and(|m| m.is_stopped()) {
                stop = StopReason::End;
                break;
            }
            if generated.len() >= budget {
                // A call the grammar has begun may run past the cap (up to
                // CALL_BUDGET): cut, it would be malformed.
                let in_call = matcher.as_ref().is_some_and(|m| !m.is_stopped())
                    && text_bytes
                        .trim_ascii_start()
                        .starts_with(crate::grammar::CALL_OPEN.as_bytes());
                if in_call && !extended {
                    extended = true;
                    budget = CALL_BUDGET.max(budget).min(room);
                }
                if generated.len() >= budget {
                    break;
                }
            }
            logits = self.weights.forward(&[token], &mut session.cache)?;
            session.tokens.push(token);
        }
        if sent < text_bytes.len() && stop != StopReason::Cancelled {
            let _ = on_text(&String::from_utf8_lossy(&text_bytes[sent..]));
        }
        Ok(Generated {
            text: String::from_utf8_lossy(&text_bytes).into_owned(),
            output_tokens: generated.len(),
            prompt_tokens: prompt.len(),
            cached_tokens: cached,
            stop,
            prompt_time,
            generate_time: gen_started.elapsed(),
            constrain_time,
        })
    }

    /// The conversation to run `prompt` in. A cached one that `prompt`
    /// extends is taken as it is. One that shares only a beginning with it
    /// (the company and seat at the top of another phase's prompt) is left
    /// in place for its own next round, and that beginning is copied into a
    /// new conversation: a copy of the keys and values costs milliseconds,
    /// running those tokens again costs seconds. Otherwise a fresh one (the
    /// least recently used one's storage when the cache is full).
    fn take_session(&self, prompt: &[u32]) -> Session {
        let mut sessions = self.sessions.lock();
        let best = sessions
            .iter()
            .enumerate()
            .map(|(i, s)| (i, common_prefix(&s.tokens, prompt)))
            .max_by_key(|&(_, n)| n);
        match best {
            Some((i, n)) if n > 0 && n >= sessions[i].tokens.len() => return sessions.remove(i),
            Some((i, n)) if n >= MIN_SHARED_PREFIX => {
                if let Ok(cache) = sessions[i].cache.fork(n) {
                    let tokens = sessions[i].tokens[..n].to_vec();
                    // The source proved useful: it is now the most recent.
                    let source = sessions.remove(i);
                    sessions.push(source);
                    return Session { tokens, cache };
                }
            }
            _ => {}
        }
        if sessions.len() >= self.max_sessions {
            let mut oldest = sessions.remove(0);
            oldest.tokens.clear();
            oldest.cache.truncate(0);
            return oldest;
        }
        Session {
            tokens: Vec::new(),
            cache: KvCache::new(self.weights.hyper.n_layer),
        }
    }

    fn put_session(&self, session: Session) {
        let mut sessions = self.sessions.lock();
        sessions.push(session);
        while sessions.len() > self.max_sessions {
            sessions.remove(0);
        }
    }

    /// Tokens generated since load, over every call: how far a cancelled
    /// generation went.
    pub fn tokens_generated(&self) -> u64 {
        self.generated_total.load(Ordering::Relaxed)
    }

    /// Bytes held by cached conversations.
    pub fn cache_bytes(&self) -> usize {
        self.sessions.lock().iter().map(|s| s.cache.bytes()).sum()
    }
}

/// Tokens of the answer so far that repeating is discouraged over.
const REPEAT_WINDOW: usize = 64;
/// How much a repeated token's logit is damped (1.0: not at all).
const REPEAT_PENALTY: f32 = 1.1;

/// Damps the tokens the last [`REPEAT_WINDOW`] of the answer used: greedy
/// decoding on a small model otherwise loops on a phrase until the cap.
/// The threads local models compute on: one per core. `None` when the
/// threads cannot be started; generation then runs on the caller's thread,
/// handing its products to rayon's global pool.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("crewlet-llm-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

fn penalize_repeats(logits: &mut [f32], generated: &[u32]) {
    let start = generated.len().saturating_sub(REPEAT_WINDOW);
    let mut seen: Vec<u32> = generated[start..].to_vec();
    seen.sort_unstable();
    seen.dedup();
    for t in seen {
        if let Some(l) = logits.get_mut(t as usize)
            && l.is_finite()
        {
            *l = if *l > 0.0 {
                *l / REPEAT_PENALTY
            } else {
                *l * REPEAT_PENALTY
            };
        }
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How many leading bytes of `b` are whole UTF-8 characters.
fn utf8_complete(b: &[u8]) -> usize {
    match std::str::from_utf8(b) {
        Ok(_) => b.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        // Invalid bytes (not merely cut): pass them on, replaced.
        Err(_) => b.len(),
    }
}

fn pick(logits: &[f32], temperature: f32, rng: &mut impl Rng) -> u32 {
    if temperature <= 0.0 {
        return argmax(logits);
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f32> = logits
        .iter()
        .map(|&l| {
            if l.is_finite() {
                ((l - max) / temperature).exp()
            } else {
                0.0
            }
        })
        .collect();
    match WeightedIndex::new(&weights) {
        Ok(dist) => dist.sample(rng) as u32,
        Err(_) => argmax(logits),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_characters_wait_for_their_last_byte() {
        let e = "é".as_bytes();
        assert_eq!(utf8_complete(&e[..1]), 0);
        assert_eq!(utf8_complete(e), 2);
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4]), 2);
    }

    #[test]
    fn zero_temperature_is_greedy() {
        let mut rng = rand::rng();
        assert_eq!(pick(&[0.1, 3.0, f32::NEG_INFINITY], 0.0, &mut rng), 1);
        for _ in 0..20 {
            assert_ne!(pick(&[0.1, 3.0, f32::NEG_INFINITY], 1.0, &mut rng), 2);
        }
    }
}
