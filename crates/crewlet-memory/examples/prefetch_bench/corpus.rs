//! Synthetic diary vectors shaped like text embeddings (see the crate
//! docs of `prefetch_bench`), all from [`SEED`], so a re-run or a kept
//! database sees the same agents and topics.

use crewlet_core::AgentId;

/// The embedding width of all-MiniLM-L6-v2, the local model.
pub const DIM: usize = 384;
pub const SEED: u64 = 0x5eed_cafe_f00d_d1a7;

/// splitmix64: deterministic, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Two standard normals (Box-Muller).
    fn normal_pair(&mut self) -> (f32, f32) {
        let u = self.unit().max(f64::MIN_POSITIVE);
        let v = self.unit();
        let r = (-2.0 * u.ln()).sqrt();
        let t = std::f64::consts::TAU * v;
        ((r * t.cos()) as f32, (r * t.sin()) as f32)
    }

    fn normal_into(&mut self, out: &mut [f32], sigma: f32) {
        for pair in out.chunks_mut(2) {
            let (a, b) = self.normal_pair();
            pair[0] = a * sigma;
            if let Some(x) = pair.get_mut(1) {
                *x = b * sigma;
            }
        }
    }
}

fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Noise per dimension: |noise| ~ 1 against a unit centroid, so a row has
/// cosine ~0.7 to its topic and ~0.5 to another row of the same topic.
const NOISE: f32 = 0.051;
/// Topics each agent favours.
const OWN_TOPICS: usize = 12;

/// The topic centroids and each agent's favourite topics, all from [`SEED`].
pub struct Corpus {
    centroids: Vec<Vec<f32>>,
    agents: u64,
}

impl Corpus {
    pub fn new(topics: usize, agents: u64) -> Self {
        let mut rng = Rng::new(SEED);
        let mut common = vec![0.0; DIM];
        rng.normal_into(&mut common, 1.0);
        normalize(&mut common);
        let centroids = (0..topics)
            .map(|_| {
                let mut c = vec![0.0; DIM];
                rng.normal_into(&mut c, 1.0);
                normalize(&mut c);
                c.iter_mut().zip(&common).for_each(|(x, m)| *x += 0.42 * m);
                normalize(&mut c);
                c
            })
            .collect();
        Self { centroids, agents }
    }

    fn topic_of(&self, agent: u64, rng: &mut Rng) -> usize {
        let n = self.centroids.len();
        if rng.unit() < 0.5 {
            // The agent's own topics: a fixed spread from its index.
            let k = rng.below(OWN_TOPICS) as u64;
            ((agent.wrapping_mul(7919) + k * 104_729) % n as u64) as usize
        } else {
            rng.below(n)
        }
    }

    /// A vector as agent `agent` would write (or query) it.
    pub fn sample(&self, agent: u64, rng: &mut Rng) -> Vec<f32> {
        let topic = self.topic_of(agent % self.agents, rng);
        let mut v = vec![0.0; DIM];
        rng.normal_into(&mut v, NOISE);
        v.iter_mut()
            .zip(&self.centroids[topic])
            .for_each(|(x, c)| *x += c);
        normalize(&mut v);
        v
    }
}

/// Agent 0 is the big one, agent 1 the small one, the rest share the
/// remaining rows evenly.
pub fn agent_id(i: u64) -> AgentId {
    match i {
        0 => AgentId::for_seat("PrefetchBench", "big"),
        1 => AgentId::for_seat("PrefetchBench", "small"),
        n => AgentId::for_seat("PrefetchBench", &format!("agent-{n}")),
    }
}
