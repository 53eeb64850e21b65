//! [`TokenLedger`] conformance.

use std::sync::Arc;

use crewlet_core::AgentId;

use super::ok;
use crate::repos::ledger::{
    BudgetCharge, BudgetRefusal, BudgetRow, BudgetType, ChargeOutcome, ReserveOutcome, TokenLedger,
    UnitCap, agent_scope, unit_scope,
};

fn charge(handle: &str, tokens: u64, org_max: u64, agent_max: u64) -> BudgetCharge {
    BudgetCharge::new(
        AgentId::for_seat("Conformance", handle),
        handle,
        tokens,
        org_max,
        agent_max,
    )
}

async fn row(ledger: &dyn TokenLedger, scope: &str) -> Option<BudgetRow> {
    ok(ledger.budgets().await, "reading budgets")
        .into_iter()
        .find(|r| r.scope == scope)
}

async fn used(ledger: &dyn TokenLedger, scope: &str) -> u64 {
    row(ledger, scope).await.map_or(0, |r| r.used_tokens)
}

pub async fn charges_accumulate_in_both_scopes(ledger: Arc<dyn TokenLedger>) {
    let c = charge("eng", 100, 1000, 500);
    assert_eq!(
        ok(ledger.charge(&c).await, "charge"),
        ChargeOutcome::Charged
    );
    assert_eq!(
        ok(ledger.charge(&c).await, "charge"),
        ChargeOutcome::Charged
    );
    let budgets = ok(ledger.budgets().await, "budgets");
    assert_eq!(budgets.len(), 2);
    assert_eq!(budgets[0].scope, "org", "org is listed first");
    assert_eq!(budgets[0].budget_type, BudgetType::Org);
    assert_eq!((budgets[0].used_tokens, budgets[0].max_tokens), (200, 1000));
    let agent = &budgets[1];
    assert_eq!(agent.scope, agent_scope(&c.agent_id));
    assert_eq!(agent.budget_type, BudgetType::Agent);
    assert_eq!(agent.agent_id, Some(c.agent_id));
    assert_eq!(agent.agent_handle.as_deref(), Some("eng"));
    assert_eq!((agent.used_tokens, agent.max_tokens), (200, 500));
    assert!(agent.refused_at.is_none());
}

async fn hammer(ledger: Arc<dyn TokenLedger>, make: impl Fn(usize) -> BudgetCharge) -> u64 {
    let mut tasks = Vec::new();
    for task in 0..16 {
        let ledger = Arc::clone(&ledger);
        let c = make(task);
        tasks.push(tokio::spawn(async move {
            let mut charged = 0u64;
            for _ in 0..10 {
                if ok(ledger.charge(&c).await, "concurrent charge") == ChargeOutcome::Charged {
                    charged += c.tokens;
                }
            }
            charged
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += ok(t.await, "charging task");
    }
    total
}

pub async fn concurrent_charges_never_overspend_the_agent_cap(ledger: Arc<dyn TokenLedger>) {
    // 16 tasks x 10 charges x 7 tokens = 1120 asked against a cap of 500.
    let charged = hammer(Arc::clone(&ledger), |_| charge("eng", 7, 0, 500)).await;
    let scope = agent_scope(&AgentId::for_seat("Conformance", "eng"));
    let used_now = used(&*ledger, &scope).await;
    assert_eq!(
        charged, used_now,
        "what callers were told matches the ledger"
    );
    assert!(used_now <= 500, "overspent: {used_now} > 500");
    assert_eq!(used_now, 497, "every charge that fit was accepted");
    assert_eq!(used(&*ledger, "org").await, 497);
}

pub async fn concurrent_charges_never_overspend_the_org_cap(ledger: Arc<dyn TokenLedger>) {
    // 16 different agents share an org cap of 1000; 1600 tokens asked.
    let charged = hammer(Arc::clone(&ledger), |i| {
        charge(&format!("a{i}"), 10, 1000, 0)
    })
    .await;
    let org = used(&*ledger, "org").await;
    assert_eq!(org, 1000);
    assert_eq!(charged, 1000);
    let agents: u64 = ok(ledger.budgets().await, "budgets")
        .iter()
        .filter(|r| r.budget_type == BudgetType::Agent)
        .map(|r| r.used_tokens)
        .sum();
    assert_eq!(agents, 1000, "agent scopes charged exactly with the org");
}

pub async fn refusal_reports_type_used_and_max(ledger: Arc<dyn TokenLedger>) {
    assert_eq!(
        ok(ledger.charge(&charge("eng", 80, 0, 100)).await, "charge"),
        ChargeOutcome::Charged
    );
    let refused = ok(ledger.charge(&charge("eng", 30, 0, 100)).await, "charge");
    assert_eq!(
        refused,
        ChargeOutcome::Refused(BudgetRefusal {
            budget_type: BudgetType::Agent,
            used_tokens: 80,
            max_tokens: 100,
            reserved_tokens: 0,
            unit: None,
        })
    );
    let scope = agent_scope(&AgentId::for_seat("Conformance", "eng"));
    let r = row(&*ledger, &scope).await;
    assert!(r.as_ref().is_some_and(|r| r.refused_at.is_some()), "{r:?}");
    assert_eq!(r.map(|r| r.used_tokens), Some(80));
}

pub async fn org_charge_is_rolled_back_when_the_agent_refuses(ledger: Arc<dyn TokenLedger>) {
    ok(ledger.charge(&charge("eng", 40, 1000, 50)).await, "charge");
    let out = ok(ledger.charge(&charge("eng", 20, 1000, 50)).await, "charge");
    assert!(
        matches!(&out, ChargeOutcome::Refused(r) if r.budget_type == BudgetType::Agent),
        "{out:?}"
    );
    assert_eq!(used(&*ledger, "org").await, 40, "org charge rolled back");
}

pub async fn org_refusal_charges_nothing(ledger: Arc<dyn TokenLedger>) {
    let out = ok(ledger.charge(&charge("eng", 60, 50, 1000)).await, "charge");
    assert_eq!(
        out,
        ChargeOutcome::Refused(BudgetRefusal {
            budget_type: BudgetType::Org,
            used_tokens: 0,
            max_tokens: 50,
            reserved_tokens: 0,
            unit: None,
        })
    );
    let scope = agent_scope(&AgentId::for_seat("Conformance", "eng"));
    assert_eq!(used(&*ledger, &scope).await, 0);
    assert_eq!(used(&*ledger, "org").await, 0);
}

pub async fn zero_cap_is_unlimited(ledger: Arc<dyn TokenLedger>) {
    for _ in 0..3 {
        let out = ok(ledger.charge(&charge("eng", 1 << 40, 0, 0)).await, "charge");
        assert_eq!(out, ChargeOutcome::Charged);
    }
    assert_eq!(used(&*ledger, "org").await, 3 << 40);
}

pub async fn reset_clears_usage_and_refusal(ledger: Arc<dyn TokenLedger>) {
    ok(ledger.charge(&charge("eng", 90, 0, 100)).await, "charge");
    ok(ledger.charge(&charge("eng", 90, 0, 100)).await, "charge");
    let scope = agent_scope(&AgentId::for_seat("Conformance", "eng"));
    ok(ledger.reset(&scope).await, "reset");
    let r = row(&*ledger, &scope).await;
    assert_eq!(r.as_ref().map(|r| r.used_tokens), Some(0));
    assert!(r.is_some_and(|r| r.refused_at.is_none()));
    assert_eq!(used(&*ledger, "org").await, 90, "other scopes untouched");
    ok(ledger.reset("org").await, "reset org");
    assert_eq!(used(&*ledger, "org").await, 0);
    let missing = agent_scope(&AgentId::for_seat("Conformance", "nobody"));
    assert!(matches!(
        ledger.reset(&missing).await,
        Err(crate::StoreError::NotFound { .. })
    ));
    assert!(matches!(
        ledger.reset("team:x").await,
        Err(crate::StoreError::InvalidInput { .. })
    ));
}

pub async fn usage_accumulates_per_handle(ledger: Arc<dyn TokenLedger>) {
    ok(ledger.record_usage("eng", 100).await, "usage");
    ok(ledger.record_usage("eng", 23).await, "usage");
    ok(ledger.record_usage("pm", 5).await, "usage");
    let usage = ok(ledger.usage().await, "usage");
    let pairs: Vec<(&str, u64)> = usage
        .iter()
        .map(|u| (u.agent_handle.as_str(), u.tokens_used))
        .collect();
    assert_eq!(pairs, vec![("eng", 123), ("pm", 5)]);
}

async fn held(ledger: &dyn TokenLedger, scope: &str) -> u64 {
    row(ledger, scope).await.map_or(0, |r| r.reserved_tokens)
}

pub async fn a_reservation_holds_then_settles_what_was_spent(ledger: Arc<dyn TokenLedger>) {
    let scope = agent_scope(&AgentId::for_seat("Conformance", "eng"));
    let ReserveOutcome::Reserved(first) = ok(
        ledger.reserve(&charge("eng", 600, 1000, 0)).await,
        "reserve",
    ) else {
        panic!("600 of 1000 fits");
    };
    assert_eq!(
        (held(&*ledger, "org").await, used(&*ledger, "org").await),
        (600, 0)
    );
    assert_eq!(held(&*ledger, &scope).await, 600);
    // The hold counts against the cap: 500 more does not fit, and a plain
    // charge sees it too.
    let refused = ok(
        ledger.reserve(&charge("eng", 500, 1000, 0)).await,
        "reserve",
    );
    assert_eq!(
        refused,
        ReserveOutcome::Refused(BudgetRefusal {
            budget_type: BudgetType::Org,
            used_tokens: 0,
            max_tokens: 1000,
            reserved_tokens: 600,
            unit: None,
        })
    );
    assert!(matches!(
        ok(ledger.charge(&charge("eng", 500, 1000, 0)).await, "charge"),
        ChargeOutcome::Refused(_)
    ));
    // Settled below the hold: the rest is free again.
    ok(ledger.settle(first, 250).await, "settle");
    assert_eq!(
        (held(&*ledger, "org").await, used(&*ledger, "org").await),
        (0, 250)
    );
    assert_eq!(
        (held(&*ledger, &scope).await, used(&*ledger, &scope).await),
        (0, 250)
    );
    let ReserveOutcome::Reserved(second) = ok(
        ledger.reserve(&charge("eng", 500, 1000, 0)).await,
        "reserve",
    ) else {
        panic!("500 more fits after the settlement");
    };
    // Released: nothing charged.
    ok(ledger.release(second).await, "release");
    assert_eq!(
        (held(&*ledger, "org").await, used(&*ledger, "org").await),
        (0, 250)
    );
    // A reservation ends once.
    assert!(matches!(
        ledger.settle(second, 1).await,
        Err(crate::StoreError::NotFound { .. })
    ));
    assert!(matches!(
        ledger.release(first).await,
        Err(crate::StoreError::NotFound { .. })
    ));
}

pub async fn concurrent_reservations_never_overspend_a_cap(ledger: Arc<dyn TokenLedger>) {
    // 400 calls at once, 16 seats, each holding 100 and spending 40-100,
    // against an org cap of 12,000: what is spent never passes the cap.
    // (The pool queues callers; this count keeps every wait far inside the
    // pool's 30 s wait limit on a busy CI machine.)
    let cap = 12_000;
    let tasks: Vec<_> = (0..400u64)
        .map(|i| {
            let ledger = Arc::clone(&ledger);
            tokio::spawn(async move {
                let c = charge(&format!("s{}", i % 16), 100, cap, 0);
                match ledger.reserve(&c).await {
                    Ok(ReserveOutcome::Reserved(id)) => {
                        tokio::task::yield_now().await;
                        let spent = 40 + (i * 7) % 61;
                        ledger.settle(id, spent).await.map(|_| spent)
                    }
                    Ok(ReserveOutcome::Refused(_)) => Ok(0),
                    Err(e) => Err(e),
                }
            })
        })
        .collect();
    let mut spent = 0;
    let mut served = 0;
    for t in tasks {
        let s = ok(ok(t.await, "joining a caller"), "reserve and settle");
        spent += s;
        served += u64::from(s > 0);
    }
    let org = used(&*ledger, "org").await;
    assert_eq!(org, spent, "the ledger holds what the callers spent");
    assert!(org <= cap, "overspent: {org} > {cap}");
    assert_eq!(held(&*ledger, "org").await, 0, "every hold ended");
    // Far more than the cap was asked; calls were served until it was full.
    assert!(served >= 120, "only {served} calls were served");
    let agents: u64 = ok(ledger.budgets().await, "budgets")
        .iter()
        .filter(|r| r.budget_type == BudgetType::Agent)
        .map(|r| r.used_tokens)
        .sum();
    assert_eq!(agents, org, "agent scopes settled with the org");
}

pub async fn stale_reservations_are_released(ledger: Arc<dyn TokenLedger>) {
    let ReserveOutcome::Reserved(old) = ok(
        ledger.reserve(&charge("eng", 300, 1000, 0)).await,
        "reserve",
    ) else {
        panic!("fits");
    };
    let cut = chrono::Utc::now();
    let ReserveOutcome::Reserved(new) = ok(
        ledger.reserve(&charge("eng", 200, 1000, 0)).await,
        "reserve",
    ) else {
        panic!("fits");
    };
    assert_eq!(held(&*ledger, "org").await, 500);
    assert_eq!(ok(ledger.release_stale(cut).await, "release stale"), 1);
    assert_eq!(held(&*ledger, "org").await, 200);
    assert!(
        ledger.settle(old, 10).await.is_err(),
        "the stale hold is gone"
    );
    ok(ledger.settle(new, 150).await, "the fresh one settles");
    assert_eq!(
        (held(&*ledger, "org").await, used(&*ledger, "org").await),
        (0, 150)
    );
}

fn with_units(mut c: BudgetCharge, units: &[(&str, u64)]) -> BudgetCharge {
    c.units = units
        .iter()
        .map(|(u, max)| UnitCap {
            unit: (*u).to_owned(),
            max: *max,
        })
        .collect();
    c
}

pub async fn unit_budgets_are_shared_by_their_seats(ledger: Arc<dyn TokenLedger>) {
    let eng = |h: &str, n| with_units(charge(h, n, 0, 0), &[("eng", 100), ("rnd", 0)]);
    assert_eq!(
        ok(ledger.charge(&eng("a", 60)).await, "charge"),
        ChargeOutcome::Charged
    );
    // Another seat of the unit finds the unit's cap 60 tokens lower.
    let refused = ok(ledger.charge(&eng("b", 50)).await, "charge");
    assert_eq!(
        refused,
        ChargeOutcome::Refused(BudgetRefusal {
            budget_type: BudgetType::Unit,
            used_tokens: 60,
            max_tokens: 100,
            reserved_tokens: 0,
            unit: Some("eng".into()),
        })
    );
    assert_eq!(
        used(&*ledger, "org").await,
        60,
        "nothing charged on refusal"
    );
    assert_eq!(used(&*ledger, &unit_scope("rnd")).await, 60);
    let rows = ok(ledger.budgets().await, "budgets");
    let kinds: Vec<BudgetType> = rows.iter().map(|r| r.budget_type).collect();
    assert_eq!(
        kinds,
        [
            BudgetType::Org,
            BudgetType::Unit,
            BudgetType::Unit,
            BudgetType::Agent,
            BudgetType::Agent
        ],
        "org, units, agents: {rows:?}"
    );
    assert_eq!(rows[1].unit(), Some("eng"));
    let scopes = [unit_scope("eng"), "org".to_owned(), unit_scope("none")];
    let mut found: Vec<String> = ok(ledger.scope_rows(&scopes).await, "scope rows")
        .into_iter()
        .map(|r| r.scope)
        .collect();
    found.sort();
    assert_eq!(found, ["org".to_owned(), unit_scope("eng")]);
}

pub async fn a_new_period_starts_from_zero(ledger: Arc<dyn TokenLedger>) {
    let day = |d: u32| {
        chrono::NaiveDate::from_ymd_opt(2026, 12, d)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| t.and_utc())
    };
    let at = |d, n| {
        let mut c = charge("eng", n, 100, 0);
        c.window = day(d);
        c
    };
    assert_eq!(
        ok(ledger.charge(&at(1, 90)).await, "charge"),
        ChargeOutcome::Charged
    );
    assert!(matches!(
        ok(ledger.charge(&at(1, 20)).await, "charge"),
        ChargeOutcome::Refused(_)
    ));
    let r = row(&*ledger, "org").await;
    assert!(r.as_ref().is_some_and(|r| r.refused_at.is_some()));
    assert_eq!(r.and_then(|r| r.period_start), day(1));
    // The next day the cap is whole again, and the refusal is gone.
    assert_eq!(
        ok(ledger.charge(&at(2, 20)).await, "charge"),
        ChargeOutcome::Charged
    );
    let r = row(&*ledger, "org").await;
    assert_eq!(r.as_ref().map(|r| r.used_tokens), Some(20));
    assert!(r.as_ref().is_some_and(|r| r.refused_at.is_none()));
    assert_eq!(r.and_then(|r| r.period_start), day(2));
    // An older window never starts a period over.
    assert_eq!(
        ok(ledger.charge(&at(1, 10)).await, "charge"),
        ChargeOutcome::Charged
    );
    assert_eq!(used(&*ledger, "org").await, 30);
    // No period: usage accumulates, the row keeps its period.
    assert_eq!(
        ok(ledger.charge(&charge("eng", 10, 100, 0)).await, "charge"),
        ChargeOutcome::Charged
    );
    assert_eq!(used(&*ledger, "org").await, 40);
}

pub async fn a_warning_is_claimed_once_per_period(ledger: Arc<dyn TokenLedger>) {
    let warned = |c: BudgetCharge| {
        let ledger = Arc::clone(&ledger);
        async move {
            let ReserveOutcome::Reserved(id) = ok(ledger.reserve(&c).await, "reserve") else {
                panic!("fits: {c:?}");
            };
            ok(ledger.settle(id, c.tokens).await, "settle")
        }
    };
    let c = |n| {
        let mut c = charge("eng", n, 1000, 0);
        c.warn_at = 0.8;
        c
    };
    assert!(warned(c(700)).await.is_empty(), "70% does not warn");
    let w = warned(c(100)).await;
    assert_eq!(w.len(), 1, "80% of the org cap warns: {w:?}");
    assert_eq!(
        (
            w[0].scope.as_str(),
            w[0].budget_type,
            w[0].used_tokens,
            w[0].max_tokens
        ),
        ("org", BudgetType::Org, 800, 1000)
    );
    assert!(warned(c(100)).await.is_empty(), "once per period");
    assert!(
        row(&*ledger, "org")
            .await
            .is_some_and(|r| r.warned_at.is_some())
    );
    // A reset clears the warning with the usage.
    ok(ledger.reset("org").await, "reset");
    assert!(
        row(&*ledger, "org")
            .await
            .is_some_and(|r| r.warned_at.is_none())
    );
    assert!(warned(c(500)).await.is_empty());
    assert_eq!(warned(c(300)).await.len(), 1, "warns again after a reset");
    // Without warn_at, nothing is claimed.
    assert!(warned(charge("eng", 10, 1000, 0)).await.is_empty());
}
