//! What the Execute phase hands the spawn tools (see [`crate::subagent`]),
//! and folding what the sub-agents spent back into the turn.

use std::sync::Arc;

use parking_lot::Mutex;

use super::TurnEngine;
use super::ctx::PhaseCtx;
use crate::subagent::Host;

impl TurnEngine {
    /// The spawn tools' view of this phase of this turn.
    pub(super) fn subagent_host(&self, pc: &PhaseCtx<'_, '_>) -> Arc<Host> {
        let t = pc.turn;
        Arc::new(Host {
            company: self.company.clone(),
            llm: self.llm.clone(),
            tools: self.tools.clone(),
            ledger: self.ledger.clone(),
            sink: self.sink.clone(),
            tracker: self.usage.clone(),
            skills: self.skills.clone(),
            settings: self.subagents.clone(),
            source: self.settings.source.clone(),
            patience: self.settings.store_patience,
            stream: self.settings.stream,
            seat: t.seat.clone(),
            task_id: t.trigger.task_id.clone(),
            channel: t.trigger.channel.clone(),
            sender: t.trigger.sender.clone(),
            delegation_depth: t.trigger.delegation_depth,
            turn_id: t.turn_id,
            iteration: pc.iteration,
            spent: Mutex::new(crewlet_llm::Usage::default()),
            warnings: Mutex::new(Vec::new()),
        })
    }

    /// Adds the sub-agents' tokens to the turn's total and queues their
    /// budget warnings with the phase's.
    pub(super) fn fold_subagents(pc: &PhaseCtx<'_, '_>, host: &Host) {
        let spent = *host.spent.lock();
        pc.turn.usage.lock().add(&spent);
        let warnings = std::mem::take(&mut *host.warnings.lock());
        pc.turn.budget_warnings.lock().extend(warnings);
    }
}
