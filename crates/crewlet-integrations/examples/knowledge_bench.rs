//! Knowledge search and import at scale (`cargo xtask bench knowledge`),
//! against the fake Confluence and the fake Plane in this process:
//! - search latency of the `## Relevant knowledge` prefetch's search step
//!   (the auxiliary model's query writing is not included): `--searches`
//!   queries (default 500) over `--pages` pages (default 1,000), p50/p99;
//! - import of `--pages` Markdown pages over 10 containers: the first run
//!   (every page created), the second (every page unchanged), requests per
//!   page for each.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crewlet_config::Company;
use crewlet_integrations::knowledge::import::{self, DEFAULT_SKILLS_CONTAINER, Publisher};
use crewlet_integrations::knowledge::{
    ConfluencePublisher, ConfluenceSearcher, KnowledgeSearcher, PlanePublisher, PlaneSearcher,
};
use crewlet_test_support::confluence::FakeConfluence;
use crewlet_test_support::plane::FakePlane;

const CONTAINERS: usize = 10;
const WORDS: [&str; 12] = [
    "deploy",
    "rollback",
    "incident",
    "database",
    "migration",
    "onboarding",
    "release",
    "review",
    "oncall",
    "billing",
    "search",
    "cache",
];

struct Args {
    pages: usize,
    searches: usize,
}

fn args() -> Result<Args> {
    let mut a = Args {
        pages: 1000,
        searches: 500,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--pages" => a.pages = value.parse()?,
            "--searches" => a.searches = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    if a.pages == 0 || a.searches == 0 {
        bail!("--pages and --searches must be at least 1");
    }
    Ok(a)
}

fn title(i: usize) -> String {
    format!(
        "{} {} guide {i}",
        WORDS[i % WORDS.len()],
        WORDS[(i / WORDS.len()) % WORDS.len()]
    )
}

fn body(i: usize) -> String {
    let mut out = format!("How the team handles {}.\n\n", title(i));
    for k in 0..20 {
        out.push_str(WORDS[(i + k * 7) % WORDS.len()]);
        out.push_str(if k % 8 == 7 { ".\n" } else { " " });
    }
    out
}

/// `pages` Markdown files over [`CONTAINERS`] folders.
fn write_docs(dir: &Path, pages: usize) -> Result<()> {
    for i in 0..pages {
        let folder = dir.join(format!("C{}", i % CONTAINERS));
        std::fs::create_dir_all(&folder)?;
        std::fs::write(
            folder.join(format!("page-{i}.md")),
            format!("# {}\n\n{}", title(i), body(i)),
        )?;
    }
    Ok(())
}

fn temp_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("crewlet-knowledge-bench-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn time_searches(
    s: &dyn KnowledgeSearcher,
    seat: &str,
    n: usize,
) -> (Duration, Duration, f64) {
    let mut samples = Vec::with_capacity(n);
    let mut hits = 0usize;
    for i in 0..n {
        let q = format!(
            "{} {}",
            WORDS[i % WORDS.len()],
            WORDS[(i * 5 + 1) % WORDS.len()]
        );
        let t = Instant::now();
        hits += s.search(seat, &q, 8, &[]).await.len();
        samples.push(t.elapsed());
    }
    samples.sort();
    (
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        hits as f64 / n as f64,
    )
}

async fn import_twice(
    publisher: &dyn Publisher,
    dir: &Path,
    requests: impl Fn() -> usize,
    pages: usize,
) -> Result<()> {
    for run in ["first (all new)", "second (all unchanged)"] {
        let before = requests();
        let t = Instant::now();
        let collected = import::collect(dir, DEFAULT_SKILLS_CONTAINER)?;
        let mut quiet = |_: &str| {};
        let plan = import::plan(publisher, collected, &mut quiet).await;
        let report = import::apply(publisher, &plan, &mut quiet).await;
        let took = t.elapsed();
        let made = requests().saturating_sub(before);
        println!(
            "  import, {run}: {:.2} s ({:.0} pages/s), {:.2} requests per page; {report}",
            took.as_secs_f64(),
            pages as f64 / took.as_secs_f64(),
            made as f64 / pages as f64
        );
        if !report.failed.is_empty() {
            bail!("the import failed: {report}");
        }
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let a = args()?;
    let dir = temp_dir()?;
    write_docs(&dir, a.pages)?;

    // Confluence.
    let wiki = FakeConfluence::start().await;
    let admin = wiki.add_user("admin");
    let eng = wiki.add_user("eng");
    for c in 0..CONTAINERS {
        wiki.add_space(&format!("C{c}"));
    }
    let yaml = format!(
        "name: Bench\nintegrations:\n  confluence: {{url: \"{}\", email: {}, token: {}}}\nroles:\n  - name: Engineer\n    handle: eng\n    integrations: {{confluence: {{user: {}, token: {}}}}}\n",
        wiki.url(),
        admin.email,
        admin.token,
        eng.email,
        eng.token
    );
    let company = Company::from_yaml("bench", &yaml)?;
    println!(
        "confluence (fake, in this process): {} pages over {CONTAINERS} spaces",
        a.pages
    );
    let publisher =
        ConfluencePublisher::from_company(&company, |_| None).map_err(anyhow::Error::msg)?;
    import_twice(&publisher, &dir, || wiki.requests().len(), a.pages).await?;
    let searcher =
        ConfluenceSearcher::from_company(&company, |_| None).context("no confluence searcher")?;
    let (p50, p99, hits) = time_searches(&searcher, "eng", a.searches).await;
    println!(
        "  search as the seat, {} queries: p50 {:.2} ms, p99 {:.2} ms, {hits:.1} hits per query",
        a.searches,
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );

    // Plane.
    let plane = FakePlane::start("acme").await;
    let padmin = plane.add_user("admin", true);
    let peng = plane.add_user("eng", false);
    for c in 0..CONTAINERS {
        let p = plane.add_project(&format!("C{c}"));
        plane.join(&p, &padmin.id);
        plane.join(&p, &peng.id);
    }
    let yaml = format!(
        "name: Bench\nintegrations:\n  plane: {{enabled: true, url: \"{}\", workspace: acme, token: {}, webhook_secret: bench-secret}}\nroles:\n  - name: Engineer\n    handle: eng\n    integrations: {{plane: {{user: {}, token: {}}}}}\n",
        plane.url(),
        padmin.token,
        peng.email,
        peng.token
    );
    let company = Company::from_yaml("bench", &yaml)?;
    println!(
        "plane (fake, in this process): {} pages over {CONTAINERS} projects",
        a.pages
    );
    let publisher = PlanePublisher::from_company(&company, |_| None).map_err(anyhow::Error::msg)?;
    import_twice(&publisher, &dir, || plane.requests().len(), a.pages).await?;
    let searcher = PlaneSearcher::from_company(&company, |_| None).context("no plane searcher")?;
    let (p50, p99, hits) = time_searches(&searcher, "eng", a.searches).await;
    println!(
        "  search as the seat, {} queries: p50 {:.2} ms, p99 {:.2} ms, {hits:.1} hits per query",
        a.searches,
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
