//! The llama architecture on quantized weights, run on the CPU with candle.
//!
//! Written here rather than taken from `candle-transformers` because the
//! provider needs what that model keeps private: a key/value cache per
//! conversation that can be cut back to a shared prefix (the rounds of a
//! phase reuse everything up to the first token that changed), weights
//! shared between those caches, and the model's full context (8k) rather
//! than a fixed 4k.

use std::sync::Arc;

use candle_core::{DType, Device, Module, Tensor};
use candle_transformers::quantized_nn::RmsNorm;

use crate::LocalModelError;
use crate::gguf::GgufFile;
use crate::qlinear::Linear;

/// Prompt tokens run through the model at once; bounds the attention
/// scores' memory for long prompts.
const PREFILL_CHUNK: usize = 256;
/// The cache grows in steps of this many positions.
const CACHE_STEP: usize = 256;

/// The shape of a llama model, from its GGUF metadata.
#[derive(Clone, Debug)]
pub struct Hyper {
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub context: usize,
    pub rms_eps: f64,
    pub rope_base: f32,
}

struct Layer {
    attn_norm: RmsNorm,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    ffn_norm: RmsNorm,
    w_gate: Linear,
    w_up: Linear,
    w_down: Linear,
}

/// The weights, loaded once and shared by every conversation.
pub struct Weights {
    pub hyper: Hyper,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: Output,
    cos: Tensor,
    sin: Tensor,
}

/// The output projection: its own matrix, or the embedding matrix itself
/// (tied embeddings, as SmolLM has), held once.
enum Output {
    Own(Linear),
    Tied,
}

/// The token embeddings: rows read out of the quantized matrix on demand,
/// or (block types [`Linear`] does not read) the whole matrix as f32.
enum Embedding {
    Rows(Linear),
    Dense(Tensor),
}

/// One conversation's keys and values, per layer, for positions `0..len`.
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
    cap: usize,
}

impl KvCache {
    pub fn new(n_layer: usize) -> Self {
        Self {
            layers: (0..n_layer).map(|_| None).collect(),
            len: 0,
            cap: 0,
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every position from `len` on (the storage stays).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// A new cache holding a copy of this one's first `len` positions.
    pub fn fork(&self, len: usize) -> candle_core::Result<KvCache> {
        let len = len.min(self.len);
        if len == 0 {
            return Ok(KvCache::new(self.layers.len()));
        }
        let mut layers = Vec::with_capacity(self.layers.len());
        for slot in &self.layers {
            let Some((k, v)) = slot else {
                candle_core::bail!("a cache with positions has no storage for a layer");
            };
            // Always new storage: the copy is written to as it grows.
            let own = |t: &Tensor| -> candle_core::Result<Tensor> {
                let part = t.narrow(2, 0, len)?;
                if part.is_contiguous() {
                    part.copy()
                } else {
                    part.contiguous()
                }
            };
            layers.push(Some((own(k)?, own(v)?)));
        }
        Ok(KvCache {
            layers,
            len,
            cap: len,
        })
    }

    /// Bytes the cache holds.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|(k, v)| (k.elem_count() + v.elem_count()) * 4)
            .sum()
    }
}

impl Weights {
    pub fn load(gguf: &mut GgufFile) -> Result<Self, LocalModelError> {
        let arch = gguf.architecture().to_owned();
        let key = |k: &str| format!("{arch}.{k}");
        let n_layer = gguf.required_uint(&key("block_count"))?;
        let n_embd = gguf.required_uint(&key("embedding_length"))?;
        let n_head = gguf.required_uint(&key("attention.head_count"))?;
        let n_kv_head = gguf
            .uint(&key("attention.head_count_kv"))
            .map_or(n_head, |n| n as usize);
        if n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 || n_embd % n_head != 0 {
            return Err(LocalModelError::Unsupported {
                path: gguf.path.clone(),
                detail: format!(
                    "{n_head} heads, {n_kv_head} key/value heads and width {n_embd} do not divide"
                ),
            });
        }
        let head_dim = n_embd / n_head;
        let context = gguf.context_length().unwrap_or(2048);
        let rms_eps = f64::from(
            gguf.float(&key("attention.layer_norm_rms_epsilon"))
                .unwrap_or(1e-5),
        );
        let rope_base = gguf.float(&key("rope.freq_base")).unwrap_or(10_000.0);
        let hyper = Hyper {
            n_layer,
            n_embd,
            n_head,
            n_kv_head,
            head_dim,
            context,
            rms_eps,
            rope_base,
        };
        let device = Device::Cpu;
        let path = gguf.path.clone();
        let GgufFile {
            content, reader, ..
        } = gguf;
        let mut tensor = |name: &str| {
            content
                .tensor(reader, name, &device)
                .map_err(|e| LocalModelError::Unsupported {
                    path: path.clone(),
                    detail: format!("tensor `{name}`: {e}"),
                })
        };
        let embed_linear = Linear::from_qtensor(tensor("token_embd.weight")?)?;
        let embed = if embed_linear.rows().is_some() {
            Embedding::Rows(embed_linear)
        } else {
            Embedding::Dense(tensor("token_embd.weight")?.dequantize(&device)?)
        };
        let output = match tensor("output.weight") {
            Ok(q) => Output::Own(Linear::from_qtensor(q)?),
            // Tied embeddings: the embedding rows' matrix serves as the
            // projection too, unless it was read as dense floats.
            Err(_) if matches!(embed, Embedding::Rows(_)) => Output::Tied,
            Err(_) => Output::Own(Linear::from_qtensor(tensor("token_embd.weight")?)?),
        };
        let norm = RmsNorm::from_qtensor(tensor("output_norm.weight")?, rms_eps)?;
        let mut layers = Vec::with_capacity(n_layer);
        for i in 0..n_layer {
            let p = format!("blk.{i}");
            let q = |t: candle_core::quantized::QTensor| Linear::from_qtensor(t);
            layers.push(Layer {
                attn_norm: RmsNorm::from_qtensor(
                    tensor(&format!("{p}.attn_norm.weight"))?,
                    rms_eps,
                )?,
                wq: q(tensor(&format!("{p}.attn_q.weight"))?)?,
                wk: q(tensor(&format!("{p}.attn_k.weight"))?)?,
                wv: q(tensor(&format!("{p}.attn_v.weight"))?)?,
                wo: q(tensor(&format!("{p}.attn_output.weight"))?)?,
                ffn_norm: RmsNorm::from_qtensor(tensor(&format!("{p}.ffn_norm.weight"))?, rms_eps)?,
                w_gate: q(tensor(&format!("{p}.ffn_gate.weight"))?)?,
                w_up: q(tensor(&format!("{p}.ffn_up.weight"))?)?,
                w_down: q(tensor(&format!("{p}.ffn_down.weight"))?)?,
            });
        }
        let (cos, sin) = rope_tables(head_dim, rope_base, context, &device)?;
        Ok(Self {
            hyper,
            embed,
            layers,
            norm,
            output,
            cos,
            sin,
        })
    }

    /// Runs `tokens` at positions `cache.len()..`, appending them to the
    /// cache, and answers the logits after the last one.
    pub fn forward(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
    ) -> Result<Vec<f32>, LocalModelError> {
        if tokens.is_empty() {
            return Err(LocalModelError::Runtime("no tokens to run".into()));
        }
        if cache.len + tokens.len() > self.hyper.context {
            return Err(LocalModelError::Runtime(format!(
                "{} tokens exceed the model's context of {}",
                cache.len + tokens.len(),
                self.hyper.context
            )));
        }
        let mut last = None;
        for chunk in tokens.chunks(PREFILL_CHUNK) {
            last = Some(self.forward_chunk(chunk, cache)?);
        }
        let logits = last.ok_or_else(|| LocalModelError::Runtime("no tokens to run".into()))?;
        Ok(logits.to_vec1::<f32>()?)
    }

    fn forward_chunk(&self, tokens: &[u32], cache: &mut KvCache) -> candle_core::Result<Tensor> {
        let h = &self.hyper;
        let device = Device::Cpu;
        let seq = tokens.len();
        let pos = cache.len;
        let kv_len = pos + seq;
        ensure_capacity(cache, h, kv_len)?;
        let mut x = self.embed(tokens)?;
        let cos = self.cos.narrow(0, pos, seq)?;
        let sin = self.sin.narrow(0, pos, seq)?;
        let n_rep = h.n_head / h.n_kv_head;
        let mask = if seq > 1 {
            Some(causal_mask(seq, pos, n_rep, &device)?)
        } else {
            None
        };
        let scale = 1.0 / (h.head_dim as f64).sqrt();
        for (layer, slot) in self.layers.iter().zip(cache.layers.iter_mut()) {
            let residual = x.clone();
            let xs = layer.attn_norm.forward(&x)?;
            let (q, k, v) = (
                layer.wq.forward(&xs)?,
                layer.wk.forward(&xs)?,
                layer.wv.forward(&xs)?,
            );
            let heads = |t: Tensor, n: usize| {
                t.reshape((1, seq, n, h.head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = heads(q, h.n_head)?;
            let k = heads(k, h.n_kv_head)?;
            let v = heads(v, h.n_kv_head)?;
            let q = candle_nn::rotary_emb::rope_i(&q, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope_i(&k, &cos, &sin)?;
            let Some((k_all, v_all)) = slot.as_ref() else {
                candle_core::bail!("the cache has no storage for a layer");
            };
            k_all.slice_set(&k, 2, pos)?;
            v_all.slice_set(&v, 2, pos)?;
            let y = if seq == 1 {
                one_query_attention(h, &q, k_all, v_all, kv_len)?
            } else {
                let keys = k_all.narrow(2, 0, kv_len)?;
                let values = v_all.narrow(2, 0, kv_len)?;
                // Grouped-query attention without copying keys: the heads
                // that share a key/value head are stacked along the query
                // axis.
                let q = q.reshape((1, h.n_kv_head, n_rep * seq, h.head_dim))?;
                let mut att = (q.matmul(&keys.t()?)? * scale)?;
                if let Some(mask) = &mask {
                    att = att.broadcast_add(mask)?;
                }
                let att = candle_nn::ops::softmax_last_dim(&att)?;
                att.matmul(&values)?
                    .reshape((1, h.n_head, seq, h.head_dim))?
                    .transpose(1, 2)?
                    .reshape((1, seq, h.n_embd))?
            };
            x = (layer.wo.forward(&y)? + residual)?;
            let residual = x.clone();
            let xs = layer.ffn_norm.forward(&x)?;
            let gate = candle_nn::ops::silu(&layer.w_gate.forward(&xs)?)?;
            let up = layer.w_up.forward(&xs)?;
            x = (layer.w_down.forward(&(gate * up)?)? + residual)?;
        }
        cache.len = kv_len;
        let last = x.narrow(1, seq - 1, 1)?;
        let last = self.norm.forward(&last)?;
        let projection = match (&self.output, &self.embed) {
            (Output::Own(m), _) | (Output::Tied, Embedding::Rows(m)) => m,
            (Output::Tied, Embedding::Dense(_)) => {
                candle_core::bail!("tied output weights need the embedding rows")
            }
        };
        projection
            .forward(&last)?
            .flatten_all()?
            .to_dtype(DType::F32)
    }
}

impl Weights {
    /// `(1, tokens, width)` embeddings of `tokens`.
    fn embed(&self, tokens: &[u32]) -> candle_core::Result<Tensor> {
        let width = self.hyper.n_embd;
        match &self.embed {
            Embedding::Rows(rows) => {
                let mut data = Vec::with_capacity(tokens.len() * width);
                for &t in tokens {
                    match rows.row(t as usize) {
                        Some(r) => data.extend(r),
                        None => candle_core::bail!("token {t} is outside the vocabulary"),
                    }
                }
                Tensor::from_vec(data, (1, tokens.len(), width), &Device::Cpu)
            }
            Embedding::Dense(m) => {
                let ids = Tensor::new(tokens, &Device::Cpu)?;
                m.index_select(&ids, 0)?.unsqueeze(0)
            }
        }
    }
}

/// Attention of one new token (`q`: `(1, heads, 1, head_dim)`) over the
/// cache's first `kv_len` positions, on the cache's own memory: a token at a
/// time needs no matrix product, and candle's would cost more in set-up than
/// in arithmetic. The heads run in parallel.
fn one_query_attention(
    h: &Hyper,
    q: &Tensor,
    k_all: &Tensor,
    v_all: &Tensor,
    kv_len: usize,
) -> candle_core::Result<Tensor> {
    use rayon::prelude::*;
    let hd = h.head_dim;
    let n_rep = h.n_head / h.n_kv_head;
    let q: Vec<f32> = q.flatten_all()?.to_vec1()?;
    let (k_store, k_layout) = k_all.storage_and_layout();
    let (v_store, v_layout) = v_all.storage_and_layout();
    let (candle_core::Storage::Cpu(k_cpu), candle_core::Storage::Cpu(v_cpu)) =
        (&*k_store, &*v_store)
    else {
        candle_core::bail!("the attention cache is not in memory");
    };
    let (keys, values) = (k_cpu.as_slice::<f32>()?, v_cpu.as_slice::<f32>()?);
    if !k_layout.is_contiguous() || !v_layout.is_contiguous() {
        candle_core::bail!("the attention cache is not contiguous");
    }
    let cap = k_layout.dims()[2];
    let (k0, v0) = (k_layout.start_offset(), v_layout.start_offset());
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; h.n_head * hd];
    out.par_chunks_mut(hd).enumerate().for_each(|(head, y)| {
        let kv = head / n_rep;
        let qh = &q[head * hd..(head + 1) * hd];
        let base_k = k0 + kv * cap * hd;
        let base_v = v0 + kv * cap * hd;
        let mut scores: Vec<f32> = (0..kv_len)
            .map(|j| {
                let k = &keys[base_k + j * hd..base_k + (j + 1) * hd];
                dot(qh, k) * scale
            })
            .collect();
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0f32;
        for s in &mut scores {
            *s = (*s - max).exp();
            total += *s;
        }
        let inv = 1.0 / total;
        for (j, p) in scores.iter().enumerate() {
            let v = &values[base_v + j * hd..base_v + (j + 1) * hd];
            let w = p * inv;
            for (o, x) in y.iter_mut().zip(v) {
                *o += w * x;
            }
        }
    });
    drop((k_store, v_store));
    Tensor::from_vec(out, (1, 1, h.n_embd), &Device::Cpu)
}

/// `a · b` in eight lanes, which the compiler turns into vector code (one
/// running sum would have to be added in order).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8
        .remainder()
        .iter()
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// Grows the cache's storage to hold `needed` positions, keeping what it
/// holds.
fn ensure_capacity(cache: &mut KvCache, h: &Hyper, needed: usize) -> candle_core::Result<()> {
    if needed <= cache.cap && cache.layers.iter().all(Option::is_some) {
        return Ok(());
    }
    let cap = needed
        .max(cache.cap * 2)
        .div_ceil(CACHE_STEP)
        .saturating_mul(CACHE_STEP)
        .min(h.context.max(needed));
    for slot in cache.layers.iter_mut() {
        let k = Tensor::zeros((1, h.n_kv_head, cap, h.head_dim), DType::F32, &Device::Cpu)?;
        let v = Tensor::zeros((1, h.n_kv_head, cap, h.head_dim), DType::F32, &Device::Cpu)?;
        if let Some((old_k, old_v)) = slot.as_ref()
            && cache.len > 0
        {
            k.slice_set(&old_k.narrow(2, 0, cache.len)?.contiguous()?, 2, 0)?;
            v.slice_set(&old_v.narrow(2, 0, cache.len)?.contiguous()?, 2, 0)?;
        }
        *slot = Some((k, v));
    }
    cache.cap = cap;
    Ok(())
}

/// The additive causal mask of `seq` new tokens at `pos..` over `pos + seq`
/// keys, repeated for the `n_rep` heads stacked on the query axis.
fn causal_mask(
    seq: usize,
    pos: usize,
    n_rep: usize,
    device: &Device,
) -> candle_core::Result<Tensor> {
    let kv_len = pos + seq;
    let mut data = Vec::with_capacity(n_rep * seq * kv_len);
    for _ in 0..n_rep {
        for i in 0..seq {
            for j in 0..kv_len {
                data.push(if j <= pos + i {
                    0.0f32
                } else {
                    f32::NEG_INFINITY
                });
            }
        }
    }
    Tensor::from_vec(data, (n_rep * seq, kv_len), device)
}

fn rope_tables(
    head_dim: usize,
    base: f32,
    context: usize,
    device: &Device,
) -> candle_core::Result<(Tensor, Tensor)> {
    let theta: Vec<f32> = (0..head_dim)
        .step_by(2)
        .map(|i| 1.0 / base.powf(i as f32 / head_dim as f32))
        .collect();
    let n = theta.len();
    let theta = Tensor::from_vec(theta, (1, n), device)?;
    let positions = Tensor::arange(0u32, context as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((context, 1))?;
    let angles = positions.matmul(&theta)?;
    Ok((angles.cos()?, angles.sin()?))
}

/// The index of the largest logit.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Shared weights.
pub type SharedWeights = Arc<Weights>;
