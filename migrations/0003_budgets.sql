-- Per-agent lifetime token totals (upserted after every completion that passed).
CREATE TABLE token_usage (
    agent_handle text        PRIMARY KEY,
    tokens_used  bigint      NOT NULL DEFAULT 0 CHECK (tokens_used >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- The budget ledger: one row per scope, `org` or `agent:{agent_id}`.
-- max_tokens 0 = unlimited (usage is still counted).
CREATE TABLE token_budget_usage (
    scope        text        PRIMARY KEY CHECK (scope = 'org' OR scope LIKE 'agent:%'),
    agent_handle text,
    used_tokens  bigint      NOT NULL DEFAULT 0 CHECK (used_tokens >= 0),
    max_tokens   bigint      NOT NULL DEFAULT 0 CHECK (max_tokens >= 0),
    refused_at   timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
