//! The conformance suites (feature `testsuite`): one per repository trait,
//! run against the in-memory twins and PostgreSQL from
//! `crates/crewlet-memory/tests/conformance.rs`. Each case is a public
//! async fn taking the subject; a `*_conformance!` macro expands every case
//! of a suite into a `#[tokio::test]`, given a factory
//! `|| async { Some((subject, guard)) }` (`None` skips, e.g. PostgreSQL
//! absent outside CI; `guard` lives as long as the test, e.g. a throw-away
//! database).
//!
//! Vectors in these cases are a few dimensions wide: both backends read
//! them as zero-padded to the embedding column, which is itself under test.

pub mod diary;
pub mod episodes;
pub mod onboarding;
pub mod profiles;
pub mod skills;

use std::fmt::Display;

use chrono::{DateTime, SubsecRound, Utc};

use crate::error::MemoryError;

/// Unwraps a result or fails the test naming what was attempted.
pub fn ok<T, E: Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what} failed: {e}"),
    }
}

/// The error of a call that had to fail, or a test failure naming it.
pub fn err<T: std::fmt::Debug>(r: Result<T, MemoryError>, what: &str) -> MemoryError {
    match r {
        Ok(v) => panic!("{what} should have failed, got {v:?}"),
        Err(e) => e,
    }
}

/// A whole-second instant near now (the database keeps microseconds; whole
/// seconds compare equal across backends).
pub fn base_time() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(0)
}

/// Whether two scores agree to float rounding.
pub fn close(a: f32, b: f32) -> bool {
    (a - b).abs() < 1e-4
}

/// A vector wider than any embedding column can be (pgvector's HNSW caps
/// the width at 2000).
pub fn too_wide() -> Vec<f32> {
    vec![0.5; 4096]
}

#[doc(hidden)]
#[macro_export]
macro_rules! __memory_conformance_cases {
    ($make:expr, $suite:ident, [$($case:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some((subject, _guard)) = ($make)().await else {
                    return;
                };
                $crate::testsuite::$suite::$case(subject).await;
            }
        )*
    };
}

/// Every [`crate::Diary`] case, as tests.
#[macro_export]
macro_rules! diary_conformance {
    ($make:expr) => {
        $crate::__memory_conformance_cases!(
            $make,
            diary,
            [
                writes_are_verbatim_and_recent_is_newest_first,
                an_exact_duplicate_of_a_live_row_is_not_written,
                an_expired_row_does_not_block_the_same_content,
                concurrent_writes_of_one_content_write_once,
                ttl_hides_rows_from_every_read,
                delete_expired_removes_rows_due_at_or_before_now,
                similar_orders_by_cosine_and_scores_it,
                narrower_vectors_are_zero_padded,
                unusable_input_is_invalid_and_writes_nothing,
                rows_are_private_to_their_agent,
                recent_pages_with_offset_and_limit,
            ]
        );
    };
}

/// Every [`crate::Episodes`] case, as tests.
#[macro_export]
macro_rules! episodes_conformance {
    ($make:expr) => {
        $crate::__memory_conformance_cases!(
            $make,
            episodes,
            [
                record_round_trips_every_field_and_writes_a_turn_once,
                recent_filters_by_outcome_and_kind_newest_first_and_pages,
                similar_orders_by_cosine_within_the_agent_and_filter,
                counts_and_agents_over_the_raw_threshold,
                oldest_raw_is_oldest_first_and_skips_compacted,
                compact_replaces_raw_rows_once,
                compact_refuses_a_summary_that_is_not_compacted_or_not_the_agents,
                wider_vectors_are_invalid,
            ]
        );
    };
}

/// Every [`crate::Skills`] case, as tests.
#[macro_export]
macro_rules! skills_conformance {
    ($make:expr) => {
        $crate::__memory_conformance_cases!(
            $make,
            skills,
            [
                create_starts_at_version_one_and_names_are_unique,
                create_enforces_the_live_skill_cap,
                bodies_over_the_cap_are_refused,
                update_archives_the_prior_state_and_bumps_the_version,
                update_keeps_only_the_newest_versions,
                update_of_an_unknown_skill_is_not_found,
                record_use_counts_and_keeps_the_latest_time,
                set_state_and_list_by_state_sorted_by_name,
                similar_returns_only_active_skills_with_a_vector,
            ]
        );
    };
}

/// Every [`crate::CounterpartyProfiles`] case, as tests.
#[macro_export]
macro_rules! counterparty_profiles_conformance {
    ($make:expr) => {
        $crate::__memory_conformance_cases!(
            $make,
            profiles,
            [
                observe_creates_then_updates_and_counts,
                traits_merge_and_null_removes_a_key,
                last_seen_never_moves_back,
                about_lists_every_platform_of_one_subject,
                list_is_most_recently_seen_first_and_pages,
                concurrent_observations_each_count,
            ]
        );
    };
}

/// Every [`crate::OnboardingMarkers`] case, as tests.
#[macro_export]
macro_rules! onboarding_markers_conformance {
    ($make:expr) => {
        $crate::__memory_conformance_cases!(
            $make,
            onboarding,
            [markers_are_absent_then_marked_then_replaced,]
        );
    };
}
