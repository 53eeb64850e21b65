-- LLM calls per phase event: `agent_phase_completed` payloads carry `calls`
-- (the completions of that phase); the writer copies it into `llm_calls` so
-- the token breakdown counts LLM calls, not phase rows, without parsing JSON.
-- NULL for every other event type and for phase events without `calls`
-- (older or foreign producers); the breakdown counts NULL as one call.
--
-- Plain DDL on the parent: on a native partitioned table ADD COLUMN and
-- CREATE INDEX reach every partition (the default one included), on a
-- TimescaleDB hypertable every chunk. ADD COLUMN without a default does not
-- rewrite the table.

ALTER TABLE crewlet_events ADD COLUMN llm_calls integer;

-- The covering index has to carry the new column, or the breakdown loses
-- its index-only scan. Dropped before the backfill so the update does not
-- maintain it, created again after.
DROP INDEX crewlet_events_token_rollup;

-- Backfill the phase events the breakdown can still show (its window is at
-- most 30 days) from their payloads, with the writer's rules: a
-- non-negative number (fractions cut) or a string of digits, capped at the
-- integer maximum; anything else stays NULL. Older rows stay NULL.
UPDATE crewlet_events
SET llm_calls = CASE jsonb_typeof(payload->'calls')
        WHEN 'number' THEN least(floor((payload->>'calls')::numeric), 2147483647)::integer
        WHEN 'string' THEN least(btrim(payload->>'calls')::numeric, 2147483647)::integer
    END
WHERE event_type = 'agent_phase_completed'
  AND event_time >= now() - INTERVAL '31 days'
  -- CASE, not AND/OR: the casts run only on values that pass the checks
  AND CASE jsonb_typeof(payload->'calls')
          WHEN 'number' THEN (payload->>'calls')::numeric >= 0
          WHEN 'string' THEN btrim(payload->>'calls') ~ '^\+?[0-9]+$'
          ELSE false
      END;

-- /tokens/breakdown: a covering partial index, read index-only
CREATE INDEX crewlet_events_token_rollup ON crewlet_events (event_time)
    INCLUDE (phase, model, provider, auxiliary, turn_id, agent_id, agent_role,
             input_tokens, output_tokens, llm_calls)
    WHERE event_type = 'agent_phase_completed';
