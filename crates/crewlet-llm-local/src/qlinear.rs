//! Matrix-vector products on 4-bit (Q4_1) and 8-bit (Q8_0) GGUF weights,
//! with AVX2 chosen at run time.
//!
//! candle's own Q4_1 product is plain scalar code, and its SIMD paths are
//! compiled in only when the whole build targets AVX2; a binary built for
//! any x86-64 then runs a 135M model at ~2 tokens/s. Here the weights stay
//! in their file's blocks (scales widened to f32 once, at load), the
//! activations are quantized to 8 bits per call, and each row's dot product
//! uses AVX2 when this CPU has it (plain Rust otherwise), rows spread over
//! rayon's threads. Other block types go through candle.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use half::f16;
use rayon::prelude::*;

const BLOCK: usize = 32;
/// Weight rows one rayon task computes.
const ROWS_PER_TASK: usize = 32;

/// A linear layer (`y = x Wᵀ`) on quantized weights.
pub enum Linear {
    Q4_1(Blocks<16>),
    Q8_0(Blocks<32>),
    Other(QMatMul),
}

/// Rows of 32-value blocks: `n` bytes of codes per block, a scale `d` and
/// (Q4_1) an offset `m` per block.
pub struct Blocks<const N: usize> {
    rows: usize,
    cols: usize,
    d: Vec<f32>,
    m: Vec<f32>,
    qs: Vec<u8>,
}

/// One activation row quantized to 8 bits per 32-value block: codes, scale,
/// and the scale times the codes' sum (for Q4_1's offsets).
struct Q8Row {
    qs: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
}

impl Linear {
    pub fn from_qtensor(q: QTensor) -> candle_core::Result<Self> {
        let dims = q.shape().dims().to_vec();
        let (rows, cols) = match dims.as_slice() {
            [r, c] => (*r, *c),
            _ => return Ok(Linear::Other(QMatMul::from_qtensor(q)?)),
        };
        if cols % BLOCK != 0 {
            return Ok(Linear::Other(QMatMul::from_qtensor(q)?));
        }
        match q.dtype() {
            GgmlDType::Q4_1 => Ok(Linear::Q4_1(Blocks::<16>::read(
                &q.data()?,
                rows,
                cols,
                true,
            )?)),
            GgmlDType::Q8_0 => Ok(Linear::Q8_0(Blocks::<32>::read(
                &q.data()?,
                rows,
                cols,
                false,
            )?)),
            _ => Ok(Linear::Other(QMatMul::from_qtensor(q)?)),
        }
    }

    /// `x` is `(.., cols)`; the answer `(.., rows)`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (rows, cols) = match self {
            Linear::Q4_1(b) => (b.rows, b.cols),
            Linear::Q8_0(b) => (b.rows, b.cols),
            Linear::Other(m) => return m.forward(x),
        };
        let mut dims = x.dims().to_vec();
        let last = dims.pop().unwrap_or(0);
        if last != cols {
            candle_core::bail!("linear: input width {last}, weights take {cols}");
        }
        let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
        let acts: Vec<Q8Row> = xs.chunks(cols).map(quantize_row).collect();
        let n = acts.len();
        // Rows-major per task, then turned to activations-major.
        let mut by_row = vec![0f32; rows * n];
        by_row
            .par_chunks_mut(ROWS_PER_TASK * n)
            .enumerate()
            .for_each(|(task, out)| {
                let first = task * ROWS_PER_TASK;
                for (i, per_act) in out.chunks_mut(n).enumerate() {
                    match self {
                        Linear::Q4_1(b) => b.dots_q4_1(first + i, &acts, per_act),
                        Linear::Q8_0(b) => b.dots_q8_0(first + i, &acts, per_act),
                        Linear::Other(_) => {}
                    }
                }
            });
        let mut out = vec![0f32; rows * n];
        for r in 0..rows {
            for s in 0..n {
                out[s * rows + r] = by_row[r * n + s];
            }
        }
        dims.push(rows);
        Tensor::from_vec(out, dims, &Device::Cpu)
    }

    /// Row `r` of the weights as f32 (an embedding lookup); `None` for the
    /// block types this module does not read.
    pub fn row(&self, r: usize) -> Option<Vec<f32>> {
        match self {
            Linear::Q4_1(b) if r < b.rows => Some(b.row_q4_1(r)),
            Linear::Q8_0(b) if r < b.rows => Some(b.row_q8_0(r)),
            _ => None,
        }
    }

    pub fn rows(&self) -> Option<usize> {
        match self {
            Linear::Q4_1(b) => Some(b.rows),
            Linear::Q8_0(b) => Some(b.rows),
            Linear::Other(_) => None,
        }
    }
}

impl<const N: usize> Blocks<N> {
    /// Reads GGUF blocks: `d` (f16), `m` (f16, Q4_1 only), then `N` bytes.
    fn read(data: &[u8], rows: usize, cols: usize, offset: bool) -> candle_core::Result<Self> {
        let per_row = cols / BLOCK;
        let n_blocks = rows * per_row;
        let size = if offset { 4 + N } else { 2 + N };
        if data.len() != n_blocks * size {
            candle_core::bail!(
                "quantized weights: {} bytes for {n_blocks} blocks of {size}",
                data.len()
            );
        }
        let mut d = Vec::with_capacity(n_blocks);
        let mut m = Vec::with_capacity(if offset { n_blocks } else { 0 });
        let mut qs = Vec::with_capacity(n_blocks * N);
        for block in data.chunks_exact(size) {
            d.push(f16::from_le_bytes([block[0], block[1]]).to_f32());
            let codes = if offset {
                m.push(f16::from_le_bytes([block[2], block[3]]).to_f32());
                &block[4..]
            } else {
                &block[2..]
            };
            qs.extend_from_slice(codes);
        }
        Ok(Self {
            rows,
            cols,
            d,
            m,
            qs,
        })
    }

    fn per_row(&self) -> usize {
        self.cols / BLOCK
    }

    /// Row `r` against every activation row, into `out`.
    fn dots_q4_1(&self, r: usize, acts: &[Q8Row], out: &mut [f32]) {
        let nb = self.per_row();
        let b0 = r * nb;
        let qs = &self.qs[b0 * N..(b0 + nb) * N];
        let d = &self.d[b0..b0 + nb];
        let m = &self.m[b0..b0 + nb];
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            let mut out4 = out.chunks_exact_mut(4);
            let mut acts4 = acts.chunks_exact(4);
            for (slots, a) in (&mut out4).zip(&mut acts4) {
                // SAFETY: the CPU has AVX2 and FMA (checked above); every
                // slice holds `nb` whole blocks.
                let four = unsafe { avx2::dot4_q4_1(qs, d, m, [&a[0], &a[1], &a[2], &a[3]]) };
                slots.copy_from_slice(&four);
            }
            for (slot, a) in out4.into_remainder().iter_mut().zip(acts4.remainder()) {
                // SAFETY: as above.
                *slot = unsafe { avx2::dot_q4_1(qs, d, m, a) };
            }
            return;
        }
        for (slot, a) in out.iter_mut().zip(acts) {
            *slot = self.dot_q4_1(r, a);
        }
    }

    /// Row `r` against every activation row, into `out`.
    fn dots_q8_0(&self, r: usize, acts: &[Q8Row], out: &mut [f32]) {
        let nb = self.per_row();
        let b0 = r * nb;
        let qs = &self.qs[b0 * N..(b0 + nb) * N];
        let d = &self.d[b0..b0 + nb];
        #[cfg(target_arch = "x86_64")]
        if has_avx2() {
            for (slot, a) in out.iter_mut().zip(acts) {
                // SAFETY: as in `dots_q4_1`.
                *slot = unsafe { avx2::dot_q8_0(qs, d, a) };
            }
            return;
        }
        for (slot, a) in out.iter_mut().zip(acts) {
            *slot = self.dot_q8_0(r, a);
        }
    }

    /// Row `r` · `a` in plain Rust (CPUs without AVX2, and the reference
    /// the AVX2 products are tested against).
    fn dot_q4_1(&self, r: usize, a: &Q8Row) -> f32 {
        let nb = self.per_row();
        let b0 = r * nb;
        let qs = &self.qs[b0 * N..(b0 + nb) * N];
        let d = &self.d[b0..b0 + nb];
        let m = &self.m[b0..b0 + nb];
        let mut sum = 0f32;
        for b in 0..nb {
            let q = &qs[b * 16..b * 16 + 16];
            let y = &a.qs[b * 32..b * 32 + 32];
            let mut acc = 0i32;
            for j in 0..16 {
                acc += i32::from(q[j] & 0x0F) * i32::from(y[j])
                    + i32::from(q[j] >> 4) * i32::from(y[j + 16]);
            }
            sum += acc as f32 * d[b] * a.d[b] + m[b] * a.s[b];
        }
        sum
    }

    /// Row `r` · `a` in plain Rust.
    fn dot_q8_0(&self, r: usize, a: &Q8Row) -> f32 {
        let nb = self.per_row();
        let b0 = r * nb;
        let qs = &self.qs[b0 * N..(b0 + nb) * N];
        let d = &self.d[b0..b0 + nb];
        let mut sum = 0f32;
        for b in 0..nb {
            let mut acc = 0i32;
            for j in 0..32 {
                acc += i32::from(qs[b * 32 + j] as i8) * i32::from(a.qs[b * 32 + j]);
            }
            sum += acc as f32 * d[b] * a.d[b];
        }
        sum
    }

    fn row_q4_1(&self, r: usize) -> Vec<f32> {
        let nb = self.per_row();
        let mut out = vec![0f32; self.cols];
        for b in 0..nb {
            let i = r * nb + b;
            let q = &self.qs[i * N..i * N + 16];
            for j in 0..16 {
                out[b * 32 + j] = f32::from(q[j] & 0x0F) * self.d[i] + self.m[i];
                out[b * 32 + j + 16] = f32::from(q[j] >> 4) * self.d[i] + self.m[i];
            }
        }
        out
    }

    fn row_q8_0(&self, r: usize) -> Vec<f32> {
        let nb = self.per_row();
        let mut out = vec![0f32; self.cols];
        for b in 0..nb {
            let i = r * nb + b;
            for j in 0..32 {
                out[b * 32 + j] = f32::from(self.qs[i * N + j] as i8) * self.d[i];
            }
        }
        out
    }
}

fn quantize_row(x: &[f32]) -> Q8Row {
    let nb = x.len() / BLOCK;
    let mut qs = Vec::with_capacity(x.len());
    let mut d = Vec::with_capacity(nb);
    let mut s = Vec::with_capacity(nb);
    for block in x.chunks_exact(BLOCK) {
        let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
        let scale = amax / 127.0;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        let mut sum = 0i32;
        for v in block {
            let q = (v * inv).round().clamp(-127.0, 127.0) as i8;
            sum += i32::from(q);
            qs.push(q);
        }
        d.push(scale);
        s.push(scale * sum as f32);
    }
    Q8Row { qs, d, s }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    use std::sync::OnceLock;
    static AVX2: OnceLock<bool> = OnceLock::new();
    *AVX2.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

#[cfg(target_arch = "x86_64")]
// Blocks are walked by index: the same index addresses codes, scales and
// activations, through raw pointers.
#[allow(clippy::needless_range_loop)]
mod avx2 {
    use std::arch::x86_64::*;

    use super::Q8Row;

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// One Q4_1 block against one activation block: the 8 partial sums of
    /// nibbles times codes, as floats.
    #[inline(always)]
    unsafe fn q4_1_block(qs: *const u8, y: *const i8) -> __m256 {
        // SAFETY: the caller has AVX2 and 16 code bytes at `qs`, 32
        // activation bytes at `y`.
        unsafe {
            let q = _mm_loadu_si128(qs.cast());
            let nibbles = _mm256_and_si256(
                _mm256_set_m128i(_mm_srli_epi16(q, 4), q),
                _mm256_set1_epi8(0x0F),
            );
            let y = _mm256_loadu_si256(y.cast());
            let sums = _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles, y), _mm256_set1_epi16(1));
            _mm256_cvtepi32_ps(sums)
        }
    }

    /// Σ blocks of (nibbles · codes) · d·d' + m·s'. Two blocks a step, each
    /// into its own accumulator, so one block's multiply-add need not wait
    /// for the other's.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q4_1(qs: &[u8], d: &[f32], m: &[f32], a: &Q8Row) -> f32 {
        let nb = d.len();
        assert!(qs.len() >= nb * 16 && m.len() >= nb);
        assert!(a.qs.len() >= nb * 32 && a.d.len() >= nb && a.s.len() >= nb);
        let (q, y) = (qs.as_ptr(), a.qs.as_ptr());
        let (wd, wm, yd, ys) = (d.as_ptr(), m.as_ptr(), a.d.as_ptr(), a.s.as_ptr());
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut off0 = 0f32;
        let mut off1 = 0f32;
        let mut b = 0;
        // SAFETY (every read below): `b < nb`, within the lengths checked
        // above.
        unsafe {
            while b + 1 < nb {
                let s0 = q4_1_block(q.add(b * 16), y.add(b * 32));
                let s1 = q4_1_block(q.add(b * 16 + 16), y.add(b * 32 + 32));
                acc0 = _mm256_fmadd_ps(s0, _mm256_set1_ps(*wd.add(b) * *yd.add(b)), acc0);
                acc1 = _mm256_fmadd_ps(s1, _mm256_set1_ps(*wd.add(b + 1) * *yd.add(b + 1)), acc1);
                off0 += *wm.add(b) * *ys.add(b);
                off1 += *wm.add(b + 1) * *ys.add(b + 1);
                b += 2;
            }
            if b < nb {
                let s0 = q4_1_block(q.add(b * 16), y.add(b * 32));
                acc0 = _mm256_fmadd_ps(s0, _mm256_set1_ps(*wd.add(b) * *yd.add(b)), acc0);
                off0 += *wm.add(b) * *ys.add(b);
            }
            hsum(_mm256_add_ps(acc0, acc1)) + off0 + off1
        }
    }

    /// [`dot_q4_1`] of one weight row against four activation rows at once:
    /// each block's nibbles are unpacked once for the four, and the four
    /// sums are independent chains.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot4_q4_1(qs: &[u8], d: &[f32], m: &[f32], a: [&Q8Row; 4]) -> [f32; 4] {
        let nb = d.len();
        assert!(qs.len() >= nb * 16 && m.len() >= nb);
        for row in a {
            assert!(row.qs.len() >= nb * 32 && row.d.len() >= nb && row.s.len() >= nb);
        }
        // Raw pointers, so that the loop neither re-reads the rows' vectors
        // nor checks bounds (the lengths are checked above).
        let yq = a.map(|r| r.qs.as_ptr());
        let yd = a.map(|r| r.d.as_ptr());
        let ys = a.map(|r| r.s.as_ptr());
        let (wq, wd, wm) = (qs.as_ptr(), d.as_ptr(), m.as_ptr());
        let low = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut off = [0f32; 4];
        for b in 0..nb {
            // SAFETY: `b < nb`, within every length checked above.
            unsafe {
                let q = _mm_loadu_si128(wq.add(b * 16).cast());
                let nibbles = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low);
                let (db, mb) = (*wd.add(b), *wm.add(b));
                for k in 0..4 {
                    let y = _mm256_loadu_si256(yq[k].add(b * 32).cast());
                    let sums = _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles, y), ones);
                    let scale = _mm256_set1_ps(db * *yd[k].add(b));
                    acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[k]);
                    off[k] += mb * *ys[k].add(b);
                }
            }
        }
        let mut out = [0f32; 4];
        for k in 0..4 {
            out[k] = unsafe { hsum(acc[k]) } + off[k];
        }
        out
    }

    /// Σ blocks of (codes · codes') · d·d'.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_q8_0(qs: &[u8], d: &[f32], a: &Q8Row) -> f32 {
        let nb = d.len();
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        for b in 0..nb {
            // SAFETY: 32 code bytes on each side per block.
            let x = unsafe { _mm256_loadu_si256(qs.as_ptr().add(b * 32).cast()) };
            let y = unsafe { _mm256_loadu_si256(a.qs.as_ptr().add(b * 32).cast()) };
            // |x| · (y with x's sign): maddubs wants one unsigned side.
            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
            let sums = _mm256_madd_epi16(pairs, ones);
            let scale = _mm256_set1_ps(d[b] * a.d[b]);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
        }
        unsafe { hsum(acc) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q4_1_block(d: f32, m: f32, codes: [u8; 16]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&f16::from_f32(d).to_le_bytes());
        b.extend_from_slice(&f16::from_f32(m).to_le_bytes());
        b.extend_from_slice(&codes);
        b
    }

    #[test]
    fn q4_1_products_match_the_dequantized_weights() {
        // Two rows of 64 values.
        let mut data = Vec::new();
        for r in 0..4u8 {
            let codes: [u8; 16] =
                std::array::from_fn(|j| ((j as u8 * 7 + r) % 16) | (((j as u8 + r) % 16) << 4));
            data.extend(q4_1_block(0.25 + f32::from(r) * 0.1, -1.0, codes));
        }
        let w = Blocks::<16>::read(&data, 2, 64, true).unwrap();
        let x: Vec<f32> = (0..64).map(|i| ((i as f32) * 0.37).sin()).collect();
        let a = quantize_row(&x);
        for r in 0..2 {
            let exact: f32 = w.row_q4_1(r).iter().zip(&x).map(|(w, x)| w * x).sum();
            let got = w.dot_q4_1(r, &a);
            assert!(
                (got - exact).abs() < 0.05 * exact.abs().max(1.0),
                "row {r}: {got} vs {exact}"
            );
        }
    }

    #[test]
    fn q8_0_products_match_the_dequantized_weights() {
        let mut data = Vec::new();
        for blk in 0..2i32 {
            data.extend_from_slice(&f16::from_f32(0.02).to_le_bytes());
            for j in 0..32i32 {
                data.push(((j * 9 + blk * 5) % 255 - 127) as i8 as u8);
            }
        }
        let w = Blocks::<32>::read(&data, 1, 64, false).unwrap();
        let x: Vec<f32> = (0..64).map(|i| ((i as f32) * 0.11).cos()).collect();
        let exact: f32 = w.row_q8_0(0).iter().zip(&x).map(|(w, x)| w * x).sum();
        let got = w.dot_q8_0(0, &quantize_row(&x));
        assert!(
            (got - exact).abs() < 0.02 * exact.abs().max(1.0),
            "{got} vs {exact}"
        );
    }

    /// The products this CPU runs (AVX2 when it has it: four activation
    /// rows at once, two blocks a step, with their remainders) against the
    /// plain ones, on an odd number of blocks and of activation rows.
    #[test]
    fn the_fast_products_agree_with_the_plain_ones() {
        let (rows, cols) = (3, 32 * 5);
        let mut q4 = Vec::new();
        let mut q8 = Vec::new();
        for blk in 0..rows * cols / 32 {
            let codes: [u8; 16] = std::array::from_fn(|j| ((j * 5 + blk * 3) % 256) as u8);
            q4.extend(q4_1_block(
                0.1 + blk as f32 * 0.01,
                -0.5 + blk as f32 * 0.03,
                codes,
            ));
            q8.extend_from_slice(&f16::from_f32(0.01 + blk as f32 * 0.001).to_le_bytes());
            for j in 0..32 {
                q8.push(((j * 11 + blk * 7) % 255) as u8);
            }
        }
        let w4 = Blocks::<16>::read(&q4, rows, cols, true).unwrap();
        let w8 = Blocks::<32>::read(&q8, rows, cols, false).unwrap();
        let acts: Vec<Q8Row> = (0..7)
            .map(|k| {
                let x: Vec<f32> = (0..cols)
                    .map(|i| ((i * (k + 2)) as f32 * 0.13).sin())
                    .collect();
                quantize_row(&x)
            })
            .collect();
        for r in 0..rows {
            let mut fast = vec![0f32; acts.len()];
            w4.dots_q4_1(r, &acts, &mut fast);
            for (k, a) in acts.iter().enumerate() {
                let plain = w4.dot_q4_1(r, a);
                assert!(
                    (fast[k] - plain).abs() <= 1e-3 * plain.abs().max(1.0),
                    "q4_1 row {r} act {k}: {} vs {plain}",
                    fast[k]
                );
            }
            w8.dots_q8_0(r, &acts, &mut fast);
            for (k, a) in acts.iter().enumerate() {
                let plain = w8.dot_q8_0(r, a);
                assert!(
                    (fast[k] - plain).abs() <= 1e-3 * plain.abs().max(1.0),
                    "q8_0 row {r} act {k}: {} vs {plain}",
                    fast[k]
                );
            }
        }
    }
}
