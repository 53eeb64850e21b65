//! What a turn knows about a seat, drawn from the company and the org chart.

use crewlet_config::{Company, Organization, Seat, SeatKind};
use crewlet_turn::{Colleague, SeatProfile};

use crate::llm::role_llm;

fn colleague(org: &Organization, handle: &str) -> Option<Colleague> {
    let s = org.seat(handle)?;
    Some(match s.kind {
        SeatKind::Agent => Colleague::agent(s.name.clone(), s.handle.clone()),
        SeatKind::Human => Colleague::human(s.name.clone(), s.handle.clone()),
    })
}

/// What a turn knows about a seat (also what `examples/tokens_bench.rs`
/// gives its reference turn).
pub fn seat_profile(company: &Company, org: &Organization, seat: &Seat) -> SeatProfile {
    let role = &seat.role;
    let mut p = SeatProfile::new(&company.name, seat.handle.clone(), seat.name.clone());
    p.agent_id = seat.agent_id;
    p.goal = role.goal.clone().unwrap_or_default();
    p.backstory = role.backstory.clone().unwrap_or_default();
    p.responsibilities = role.responsibilities.clone();
    p.guidelines = role.behavioral_guidelines.clone();
    p.manager_chain = seat
        .manager_chain
        .iter()
        .filter_map(|h| colleague(org, h))
        .collect();
    p.reports = seat
        .reports
        .iter()
        .filter_map(|h| colleague(org, h))
        .collect();
    p.unit_path = seat.unit_path.clone();
    p.token_budget = role.token_budget;
    p.unit_budgets = org
        .unit_budgets(seat)
        .into_iter()
        .map(|(unit, max)| crewlet_store::UnitCap { unit, max })
        .collect();
    p.llm = role_llm(company, role);
    p.subagent_llm = crate::tools::subagents::subagent_chain(company, role);
    p
}
