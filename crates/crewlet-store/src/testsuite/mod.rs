//! The conformance suites (feature `testsuite`): one per repository trait,
//! run against every implementation (memory and PostgreSQL) from
//! `crates/crewlet-store/tests/`. Each case is a public async fn taking the
//! subject; a `*_conformance!` macro expands every case of a suite into a
//! `#[tokio::test]`, given a factory `|| async { Some((subject, guard)) }`
//! (`None` skips, e.g. PostgreSQL absent outside CI; `guard` lives as long
//! as the test, e.g. a throw-away database).

pub mod config;
pub mod events;
pub mod fleet;
pub mod ledger;
pub mod ops;
pub mod quotas;
pub mod sandbox_runs;
pub mod secrets;

use std::fmt::Display;

/// Unwraps a result or fails the test naming what was attempted.
pub fn ok<T, E: Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what} failed: {e}"),
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
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

/// Every [`crate::TokenLedger`] case, as tests.
#[macro_export]
macro_rules! token_ledger_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make,
            ledger,
            [
                charges_accumulate_in_both_scopes,
                concurrent_charges_never_overspend_the_agent_cap,
                concurrent_charges_never_overspend_the_org_cap,
                refusal_reports_type_used_and_max,
                org_charge_is_rolled_back_when_the_agent_refuses,
                org_refusal_charges_nothing,
                zero_cap_is_unlimited,
                reset_clears_usage_and_refusal,
                usage_accumulates_per_handle,
                a_reservation_holds_then_settles_what_was_spent,
                concurrent_reservations_never_overspend_a_cap,
                stale_reservations_are_released,
                unit_budgets_are_shared_by_their_seats,
                a_new_period_starts_from_zero,
                a_warning_is_claimed_once_per_period,
            ]
        );
    };
}

/// Every [`crate::ConfigRevisions`] case, as tests.
#[macro_export]
macro_rules! config_revisions_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make,
            config,
            [
                first_revision_has_no_parent_and_can_be_activated,
                active_key_follows_activation_without_the_payload,
                stale_parent_is_a_conflict,
                exactly_one_revision_is_active,
                revert_appends_a_copy_and_activates_it,
                list_is_newest_first_and_unknown_ids_are_not_found,
                concurrent_edits_of_one_parent_let_exactly_one_win,
                inactive_drafts_do_not_move_the_parent,
                every_revision_has_its_own_uuid_and_its_parents,
                pages_are_newest_first_with_an_offset,
            ]
        );
    };
}

/// Every [`crate::WebhookDeliveries`] case, as tests.
#[macro_export]
macro_rules! webhook_deliveries_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make,
            ops,
            [
                first_claim_wins_and_a_repeat_within_five_minutes_is_a_duplicate,
                a_repeat_after_the_window_is_claimable_again,
                a_released_claim_lets_the_retry_through,
                is_claimed_looks_without_claiming,
                gc_removes_old_claims_and_the_key_is_claimable_again,
                concurrent_claims_of_one_delivery_let_exactly_one_win,
                concurrent_claims_of_many_deliveries_let_one_win_each,
            ]
        );
    };
}

/// Every [`crate::SecretValues`] case (and the secret store over it), as tests.
#[macro_export]
macro_rules! secret_values_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make,
            secrets,
            [
                rows_are_put_replaced_listed_and_removed,
                the_store_seals_lists_names_only_and_loads_values,
                rekey_moves_every_secret_to_the_active_key,
            ]
        );
    };
}

/// Every [`crewlet_core::quota::ProviderQuotas`] case, as tests.
#[macro_export]
macro_rules! provider_quotas_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make,
            quotas,
            [
                the_first_call_starts_at_once_and_unlimited_calls_never_wait,
                requests_are_spaced_by_the_interval,
                concurrent_reservations_never_exceed_the_rate,
                tokens_burst_up_to_the_bucket_then_refill,
                concurrent_token_reservations_keep_to_the_bucket,
                settling_gives_unused_tokens_back,
                a_pause_holds_every_call_until_the_reset,
                providers_have_their_own_budgets,
            ]
        );
    };
}

/// Every [`crate::ThreadFollows`] case, as tests.
#[macro_export]
macro_rules! thread_follows_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!($make, ops, [follow_unfollow_and_followers,]);
    };
}

/// Every [`crate::ScheduledRuns`] case, as tests.
#[macro_export]
macro_rules! scheduled_runs_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make,
            ops,
            [
                a_fire_is_claimed_at_most_once_across_claimers,
                prune_forgets_old_claims,
            ]
        );
    };
}

/// Every [`crate::EventStore`] case, as tests.
#[macro_export]
macro_rules! event_store_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make,
            events,
            [
                append_then_get_round_trips_the_full_envelope,
                turn_progress_is_never_stored,
                duplicate_ids_are_stored_once,
                recent_filters_by_type_category_agent_task_and_time,
                keyset_paging_walks_every_event_once_newest_first,
                page_size_defaults_to_50_and_is_capped_at_500,
                by_trace_is_ordered_oldest_first_and_capped,
                token_breakdown_groups_by_phase_model_worker_agent_and_turn,
                by_turn_keeps_the_latest_turns_whole,
                token_breakdown_accepts_1_to_30_days_only,
                unknown_id_is_none,
            ]
        );
    };
}

/// Every lease, completion ledger and effect journal case, as tests; the
/// factory gives a [`fleet::Fleet`].
#[macro_export]
macro_rules! fleet_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make,
            fleet,
            [
                a_free_resource_is_acquired_once_and_held_against_others,
                a_lapsed_lease_moves_with_a_greater_epoch,
                the_same_owner_after_a_lapse_gets_a_new_epoch,
                renew_extends_only_the_callers_live_leases,
                release_frees_at_once_and_keeps_the_epoch_growing,
                list_is_by_prefix_and_carries_meta,
                concurrent_acquires_let_exactly_one_owner_win_each_resource,
                holds_checks_owner_epoch_and_expiry,
                a_completed_trigger_is_found_and_recorded_once,
                the_journal_keeps_entries_in_step_order_once,
                a_stale_holder_cannot_write_the_journal,
                a_dead_incarnations_leases_are_taken_over_with_new_epochs,
            ]
        );
    };
}

/// Every [`crate::SandboxRuns`] case, as tests.
#[macro_export]
macro_rules! sandbox_runs_conformance {
    ($make:expr) => {
        $crate::__conformance_cases!(
            $make,
            sandbox_runs,
            [
                insert_is_idempotent_per_call,
                by_call_finds_the_run_of_a_call,
                transition_is_compare_and_set,
                concurrent_claims_let_exactly_one_win,
                a_patch_sets_only_what_it_says,
                with_status_filters_by_status_and_seat_oldest_first,
                for_turn_lists_one_turns_runs_oldest_first,
                awaiting_answer_matches_seat_conversation_and_status,
                prune_removes_only_closed_old_runs,
            ]
        );
    };
}
