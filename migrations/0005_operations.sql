-- Threads an agent follows on a chat backend (Slack, ...).
CREATE TABLE chat_thread_follows (
    backend      text        NOT NULL,
    agent_handle text        NOT NULL,
    channel_id   text        NOT NULL,
    thread_id    text        NOT NULL,
    followed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (backend, agent_handle, channel_id, thread_id)
);
-- followers of one thread
CREATE INDEX chat_thread_follows_by_thread ON chat_thread_follows (backend, channel_id, thread_id);

-- Versioned company configuration (Tier B). Append-only; exactly one active.
CREATE TABLE company_config (
    revision_id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    parent_revision_id bigint      REFERENCES company_config (revision_id),
    created_by         text        NOT NULL,
    source             text        NOT NULL,
    summary            text        NOT NULL DEFAULT '',
    payload            jsonb       NOT NULL,
    is_active          boolean     NOT NULL DEFAULT false,
    created_at         timestamptz NOT NULL DEFAULT now(),
    activated_at       timestamptz
);
CREATE UNIQUE INDEX company_config_one_active ON company_config (is_active) WHERE is_active;

-- Webhook delivery dedupe: a repeat within 5 minutes is a duplicate; rows are
-- garbage-collected after 20 minutes.
CREATE TABLE webhook_deliveries (
    source       text        NOT NULL,
    delivery_key text        NOT NULL,
    seen_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, delivery_key)
);
CREATE INDEX webhook_deliveries_by_age ON webhook_deliveries (seen_at);

-- At-most-once schedule fires across processes.
CREATE TABLE scheduled_runs (
    scope         text        NOT NULL,
    schedule_name text        NOT NULL,
    fire_label    text        NOT NULL,
    target        text        NOT NULL,
    claimed_by    text,
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, schedule_name, fire_label, target)
);
CREATE INDEX scheduled_runs_by_age ON scheduled_runs (claimed_at);
