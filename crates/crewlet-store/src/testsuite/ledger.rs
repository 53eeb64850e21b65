//! [`TokenLedger`] conformance.

use std::sync::Arc;

use crewlet_core::AgentId;

use super::ok;
use crate::repos::ledger::{
    BudgetCharge, BudgetRefusal, BudgetRow, BudgetType, ChargeOutcome, TokenLedger, agent_scope,
};

fn charge(handle: &str, tokens: u64, org_max: u64, agent_max: u64) -> BudgetCharge {
    BudgetCharge {
        agent_id: AgentId::for_seat("Conformance", handle),
        agent_handle: handle.to_owned(),
        tokens,
        org_max,
        agent_max,
    }
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
