//! What `cargo test` printed, summed: the counts over the whole workspace and
//! the slowest test binaries, read from cargo's `Running` / `Doc-tests`
//! lines and libtest's `test result:` lines.

use std::fmt;

/// One test binary (or one crate's doc-tests) and its result line.
#[derive(Debug, Clone, PartialEq)]
pub struct Binary {
    /// `crewlet_queue tests/pulsar_slow.rs`, `crewlet_core src/lib.rs`,
    /// `crewlet_config doc-tests`: the crate, then the source.
    pub name: String,
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    /// The binary's own `finished in` time.
    pub seconds: f64,
}

/// Everything read so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Report {
    pub binaries: Vec<Binary>,
    /// The binary whose result line comes next.
    current: Option<String>,
    /// The crate whose unit tests ran last: cargo runs each package's unit
    /// tests before its integration tests, and a `Running tests/x.rs` line
    /// does not name its package.
    krate: Option<String>,
}

/// The summary line's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

impl Report {
    /// Takes one line of cargo's merged output.
    pub fn line(&mut self, line: &str) {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Running ") {
            let (stem, source) = binary_source(rest);
            let unit = rest.trim_start().starts_with("unittests ");
            if unit || self.krate.is_none() {
                self.krate = Some(stem.clone());
            }
            let krate = self.krate.as_deref().unwrap_or(&stem);
            self.current = Some(format!("{krate} {source}"));
        } else if let Some(krate) = t.strip_prefix("Doc-tests ") {
            self.current = Some(format!("{} doc-tests", krate.trim()));
        } else if let Some(result) = t.strip_prefix("test result: ") {
            let name = self
                .current
                .take()
                .unwrap_or_else(|| "(unnamed test binary)".into());
            self.binaries.push(parse_result(name, result));
        }
    }

    /// The counts; `service_skips` tests returned early because a service was
    /// absent (outside CI): libtest counted them as passed, here they are skipped.
    pub fn totals(&self, service_skips: u64) -> Totals {
        let sum = |f: fn(&Binary) -> u64| self.binaries.iter().map(f).sum::<u64>();
        let passed = sum(|b| b.passed);
        Totals {
            passed: passed.saturating_sub(service_skips),
            failed: sum(|b| b.failed),
            skipped: sum(|b| b.ignored) + service_skips.min(passed),
        }
    }

    /// The `n` binaries that took longest, slowest first.
    pub fn slowest(&self, n: usize) -> Vec<&Binary> {
        let mut all: Vec<&Binary> = self.binaries.iter().collect();
        all.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        all.truncate(n);
        all
    }
}

/// `unittests src/lib.rs (target/debug/deps/crewlet_core-0a1b2c)` is
/// `("crewlet_core", "src/lib.rs")`; `tests/e2e.rs (target/debug/deps/e2e-ff)`
/// is `("e2e", "tests/e2e.rs")`.
fn binary_source(running: &str) -> (String, String) {
    let running = running.trim();
    let (source, path) = match running.rsplit_once(" (") {
        Some((s, p)) => (s, p.trim_end_matches(')')),
        None => (running, running),
    };
    let source = source.strip_prefix("unittests ").unwrap_or(source);
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = match file.rsplit_once('-') {
        Some((stem, hash)) if !hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            stem
        }
        _ => file,
    };
    (stem.to_owned(), source.to_owned())
}

/// `ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.02s`
fn parse_result(name: String, result: &str) -> Binary {
    let mut b = Binary {
        name,
        passed: 0,
        failed: 0,
        ignored: 0,
        seconds: 0.0,
    };
    for part in result.split([';', '.']).map(str::trim) {
        let mut words = part.split_whitespace();
        let (Some(first), Some(second)) = (words.next(), words.next()) else {
            continue;
        };
        match (first, second) {
            (n, "passed") => b.passed = n.parse().unwrap_or(0),
            (n, "failed") => b.failed = n.parse().unwrap_or(0),
            (n, "ignored") => b.ignored = n.parse().unwrap_or(0),
            _ => {}
        }
    }
    if let Some((_, time)) = result.rsplit_once("finished in ") {
        b.seconds = time.trim().trim_end_matches('s').parse().unwrap_or(0.0);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "\
   Compiling crewlet-core v0.1.0 (/work/crates/crewlet-core)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 1m 02s
     Running unittests src/lib.rs (target/debug/deps/crewlet_core-0123abcd)

running 12 tests
test envelope::tests::round_trip ... ok
test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.02s

     Running unittests src/lib.rs (/var/cache/crewlet/target/debug/deps/crewlet_queue-4567cdef)

running 0 tests
test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

     Running tests/pulsar_slow.rs (/var/cache/crewlet/target/debug/deps/pulsar_slow-89ef0123)

running 4 tests
test slow_long_handler_is_delivered_exactly_once ... FAILED
test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 71.50s

   Doc-tests crewlet_config

running 2 tests
test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.25s
";

    fn report() -> Report {
        let mut r = Report::default();
        OUTPUT.lines().for_each(|l| r.line(l));
        r
    }

    #[test]
    fn result_lines_are_summed_over_every_binary() {
        let r = report();
        assert_eq!(r.binaries.len(), 4);
        let totals = r.totals(0);
        assert_eq!(
            totals,
            Totals {
                passed: 17,
                failed: 1,
                skipped: 1
            }
        );
        assert_eq!(totals.to_string(), "17 passed, 1 failed, 1 skipped");
    }

    #[test]
    fn binaries_are_named_by_crate_and_source_and_ranked_by_time() {
        let r = report();
        let slowest: Vec<(&str, f64)> = r
            .slowest(2)
            .iter()
            .map(|b| (b.name.as_str(), b.seconds))
            .collect();
        assert_eq!(
            slowest,
            [
                ("crewlet_queue tests/pulsar_slow.rs", 71.5),
                ("crewlet_config doc-tests", 1.25)
            ]
        );
        assert_eq!(r.binaries[0].name, "crewlet_core src/lib.rs");
    }

    #[test]
    fn service_skips_move_from_passed_to_skipped() {
        let totals = report().totals(5);
        assert_eq!((totals.passed, totals.skipped), (12, 6));
    }
}
