-- Reserve-then-settle for token budgets: before a model call the engine
-- holds an upper bound of what the call can cost on the org and agent
-- scopes (`reserved_tokens`), refused when used + held + the call would pass
-- the cap; after the call the hold goes and the real tokens are charged.
-- Concurrent calls, across processes, then never spend past a cap.
ALTER TABLE token_budget_usage
    ADD COLUMN reserved_tokens bigint NOT NULL DEFAULT 0 CHECK (reserved_tokens >= 0);

-- Open holds, so a settlement knows what to release and holds of a process
-- that died can be released (`release_stale`).
CREATE TABLE budget_reservations (
    id         uuid        PRIMARY KEY,
    scopes     text[]      NOT NULL,
    tokens     bigint      NOT NULL CHECK (tokens >= 0),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX budget_reservations_by_age ON budget_reservations (created_at);
