-- The event store (SPEC §4): one row per stored event.
--
-- The envelope's filter fields are columns; tags and payload are JSONB; the
-- token columns at the end are copied by the writer from the payload of
-- `agent_phase_completed` events (NULL for every other type) so the token
-- breakdown never has to parse JSON. Partitioned by event_time: the PK has to
-- include it, so `event_id` alone is indexed separately for GET /events/{id}.

DO $$
BEGIN
    EXECUTE format($ddl$
        CREATE TABLE crewlet_events (
            event_time       timestamptz NOT NULL,
            event_id         uuid        NOT NULL,
            event_type       text        NOT NULL,
            source           text        NOT NULL,
            category         text        NOT NULL,
            summary          text        NOT NULL DEFAULT '',
            agent_id         text,
            agent_role       text,
            task_id          text,
            channel_id       text,
            sender           text,
            trace_id         text,
            span_id          text,
            parent_span_id   text,
            delegation_depth integer     NOT NULL DEFAULT 0,
            tags             jsonb       NOT NULL DEFAULT '{}'::jsonb,
            payload          jsonb,
            phase            text,
            model            text,
            provider         text,
            auxiliary        text,
            turn_id          text,
            input_tokens     bigint,
            output_tokens    bigint,
            PRIMARY KEY (event_time, event_id)
        ) %s
    $ddl$, crewlet_partition_clause('event_time'));
END
$$;
SELECT crewlet_finish_time_table('crewlet_events', 'event_time');

-- GET /events/{id}
CREATE INDEX crewlet_events_by_id ON crewlet_events (event_id);
-- /events filters, each in keyset order (time, id) descending
CREATE INDEX crewlet_events_by_type ON crewlet_events (event_type, event_time DESC, event_id DESC);
CREATE INDEX crewlet_events_by_category ON crewlet_events (category, event_time DESC, event_id DESC);
CREATE INDEX crewlet_events_by_agent ON crewlet_events (agent_id, event_time DESC, event_id DESC)
    WHERE agent_id IS NOT NULL;
CREATE INDEX crewlet_events_by_task ON crewlet_events (task_id, event_time DESC, event_id DESC)
    WHERE task_id IS NOT NULL;
-- /events/trace/{trace_id}
CREATE INDEX crewlet_events_by_trace ON crewlet_events (trace_id, event_time, event_id)
    WHERE trace_id IS NOT NULL;
-- /tokens/breakdown: a covering partial index, read index-only
CREATE INDEX crewlet_events_token_rollup ON crewlet_events (event_time)
    INCLUDE (phase, model, provider, auxiliary, turn_id, agent_id, agent_role,
             input_tokens, output_tokens)
    WHERE event_type = 'agent_phase_completed';
