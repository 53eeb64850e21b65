-- `by_turn` of /tokens/breakdown: the phase events of a few recent turns,
-- found by turn id. The rest of the breakdown is summed without the turn
-- (one scan of crewlet_events_token_rollup); before, it grouped every turn
-- of the window, about 2 s over 1,000,000 events (docs/performance.md).
CREATE INDEX crewlet_events_phase_turn ON crewlet_events (turn_id)
    WHERE event_type = 'agent_phase_completed' AND turn_id IS NOT NULL;
