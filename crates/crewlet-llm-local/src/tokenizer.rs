//! The model's own tokenizer, built from the vocabulary, merges and special
//! tokens inside the GGUF (no `tokenizer.json` needed), and the byte form of
//! every token that constrained decoding works on.

use std::collections::HashMap;
use std::sync::Arc;

use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

use crate::LocalModelError;
use crate::gguf::GgufFile;

/// GGUF token types (`tokenizer.ggml.token_type`).
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// Names of end-of-turn tokens across chat formats.
const END_OF_TURN_NAMES: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
];

/// The tokenizer of one model: encode, decode, and the ids that end a turn.
pub struct ModelTokenizer {
    inner: Tokenizer,
    /// Each token's bytes (specials carry toktrie's marker byte first).
    token_bytes: Vec<Vec<u8>>,
    /// Ids that end generation: the GGUF's eos and any end-of-turn token.
    stop_ids: Vec<TokenId>,
    eos: TokenId,
    bos: Option<TokenId>,
    add_bos: bool,
    specials: Vec<TokenId>,
    names: Vec<String>,
}

impl std::fmt::Debug for ModelTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelTokenizer")
            .field("vocab", &self.token_bytes.len())
            .field("stop_ids", &self.stop_ids)
            .finish()
    }
}

impl ModelTokenizer {
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, LocalModelError> {
        let err = |detail: String| LocalModelError::Tokenizer {
            path: gguf.path.clone(),
            detail,
        };
        let kind = gguf.string("tokenizer.ggml.model").unwrap_or("");
        if kind != "gpt2" {
            return Err(err(format!(
                "tokenizer.ggml.model is `{kind}`; the local provider reads byte-level BPE (`gpt2`) vocabularies"
            )));
        }
        let md = gguf.metadata();
        let tokens: Vec<String> = md
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.to_vec().ok())
            .ok_or_else(|| err("tokenizer.ggml.tokens is missing".into()))?
            .iter()
            .map(|v| v.to_string().cloned().unwrap_or_default())
            .collect();
        let types: Vec<i32> = md
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.to_vec().ok())
            .map(|vs| vs.iter().map(|v| v.to_i32().unwrap_or(1)).collect())
            .unwrap_or_default();
        let merges: Vec<(String, String)> = md
            .get("tokenizer.ggml.merges")
            .and_then(|v| v.to_vec().ok())
            .ok_or_else(|| err("tokenizer.ggml.merges is missing".into()))?
            .iter()
            .filter_map(|v| v.to_string().ok())
            .filter_map(|m| m.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())))
            .collect();
        let vocab: ahash::AHashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| err(format!("the BPE model: {e}")))?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer(gguf.string("tokenizer.ggml.pre"))?));
        inner.with_decoder(Some(ByteLevel::default()));

        let mut specials = Vec::new();
        let mut added = Vec::new();
        for (id, name) in tokens.iter().enumerate() {
            let ty = types.get(id).copied().unwrap_or(1);
            if ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED {
                specials.push(id as TokenId);
                added.push(AddedToken::from(name.clone(), true));
            }
        }
        inner
            .add_special_tokens(added)
            .map_err(|e| err(format!("its special tokens: {e}")))?;

        let byte_of = unicode_to_byte();
        let token_bytes: Vec<Vec<u8>> = tokens
            .iter()
            .enumerate()
            .map(|(id, name)| {
                if specials.contains(&(id as TokenId)) {
                    let mut b = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    b.extend_from_slice(name.as_bytes());
                    b
                } else {
                    // A name outside the byte alphabet cannot be produced
                    // by byte-level BPE: it keeps no bytes (never allowed).
                    name.chars()
                        .map(|c| byte_of.get(&c).copied())
                        .collect::<Option<Vec<u8>>>()
                        .unwrap_or_default()
                }
            })
            .collect();

        let id_of = |key: &str| {
            gguf.uint(key)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| (n as usize) < tokens.len())
        };
        let eos = id_of("tokenizer.ggml.eos_token_id")
            .ok_or_else(|| err("tokenizer.ggml.eos_token_id is missing".into()))?;
        let mut stop_ids = vec![eos];
        for name in END_OF_TURN_NAMES {
            if let Some(&id) = vocab_id(&tokens, name).as_ref()
                && !stop_ids.contains(&id)
            {
                stop_ids.push(id);
            }
        }
        let add_bos = md
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.to_bool().ok())
            .unwrap_or(false);
        Ok(Self {
            inner,
            token_bytes,
            stop_ids,
            eos,
            bos: id_of("tokenizer.ggml.bos_token_id"),
            add_bos,
            specials,
            names: tokens,
        })
    }

    /// Tokens of `text`, with special tokens written in it (`<|im_start|>`)
    /// read as themselves.
    pub fn encode(&self, text: &str) -> Result<Vec<TokenId>, LocalModelError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| LocalModelError::Runtime(format!("tokenizing: {e}")))?;
        let mut ids = enc.get_ids().to_vec();
        if self.add_bos
            && let Some(bos) = self.bos
            && ids.first() != Some(&bos)
        {
            ids.insert(0, bos);
        }
        Ok(ids)
    }

    /// The number of tokens `text` is.
    pub fn count(&self, text: &str) -> Result<usize, LocalModelError> {
        Ok(self.encode(text)?.len())
    }

    /// The bytes of `tokens`, special tokens left out.
    pub fn decode_bytes(&self, tokens: &[TokenId]) -> Vec<u8> {
        let mut out = Vec::new();
        for &t in tokens {
            if let Some(b) = self.token_bytes.get(t as usize)
                && b.first() != Some(&TokTrie::SPECIAL_TOKEN_MARKER)
            {
                out.extend_from_slice(b);
            }
        }
        out
    }

    pub fn is_stop(&self, token: TokenId) -> bool {
        self.stop_ids.contains(&token)
    }

    pub fn stop_ids(&self) -> &[TokenId] {
        &self.stop_ids
    }

    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    pub fn is_special(&self, token: TokenId) -> bool {
        self.specials.contains(&token)
    }

    /// The text form of a token id (for templates: `bos_token`, `eos_token`).
    pub fn name(&self, token: TokenId) -> Option<&str> {
        self.names.get(token as usize).map(String::as_str)
    }

    pub fn eos(&self) -> TokenId {
        self.eos
    }

    pub fn bos(&self) -> Option<TokenId> {
        self.bos
    }

    /// The environment llguidance computes token masks in.
    pub fn tok_env(self: &Arc<Self>) -> llguidance::toktrie::TokEnv {
        let mut info = TokRxInfo::new(self.token_bytes.len() as u32, self.eos);
        info.tok_bos = self.bos;
        info.tok_end_of_turn = self.stop_ids.iter().copied().find(|&t| t != self.eos);
        let trie = TokTrie::from(&info, &self.token_bytes).with_eos_tokens(&self.stop_ids);
        Arc::new(TrieEnv {
            trie,
            tokenizer: self.clone(),
        })
    }
}

fn vocab_id(tokens: &[String], name: &str) -> Option<TokenId> {
    tokens.iter().position(|t| t == name).map(|i| i as TokenId)
}

/// The pre-tokenizer llama.cpp's `tokenizer.ggml.pre` names.
fn pre_tokenizer(pre: Option<&str>) -> Result<PreTokenizerWrapper, LocalModelError> {
    let byte_level = ByteLevel::new(false, true, true);
    Ok(match pre.unwrap_or("default") {
        // GPT-2's split, with every digit its own piece.
        "smollm" | "starcoder" | "refact" => PreTokenizerWrapper::Sequence(Sequence::new(vec![
            Digits::new(true).into(),
            byte_level.into(),
        ])),
        "llama-bpe" | "llama3" => {
            let pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
            let split = Split::new(
                SplitPattern::Regex(pattern.into()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| LocalModelError::Runtime(format!("the llama-3 split pattern: {e}")))?;
            PreTokenizerWrapper::Sequence(Sequence::new(vec![
                split.into(),
                ByteLevel::new(false, true, false).into(),
            ]))
        }
        _ => byte_level.into(),
    })
}

/// GPT-2's byte-level alphabet, read backwards: the printable character that
/// stands for each byte in a token's name.
fn unicode_to_byte() -> HashMap<char, u8> {
    let mut printable: Vec<u32> = (u32::from('!')..=u32::from('~')).collect();
    printable.extend(u32::from('¡')..=u32::from('¬'));
    printable.extend(u32::from('®')..=u32::from('ÿ'));
    let mut map = HashMap::with_capacity(256);
    let mut next = 0u32;
    for b in 0u32..256 {
        let c = if printable.contains(&b) {
            b
        } else {
            next += 1;
            255 + next
        };
        if let (Some(ch), Ok(byte)) = (char::from_u32(c), u8::try_from(b)) {
            map.insert(ch, byte);
        }
    }
    map
}

/// llguidance's view of the tokenizer: the token trie, and encoding through
/// the model's own BPE where the trie's greedy split is not canonical.
struct TrieEnv {
    trie: TokTrie,
    tokenizer: Arc<ModelTokenizer>,
}

impl TokenizerEnv for TrieEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            self.tokenizer
                .inner
                .encode(text, false)
                .map(|e| e.get_ids().to_vec())
                .unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_alphabet_covers_every_byte_once() {
        let map = unicode_to_byte();
        assert_eq!(map.len(), 256);
        assert_eq!(map.get(&'Ġ'), Some(&b' '));
        assert_eq!(map.get(&'Ċ'), Some(&b'\n'));
        assert_eq!(map.get(&'a'), Some(&b'a'));
    }
}
