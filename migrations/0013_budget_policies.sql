-- Budget policies: unit budgets (`unit:{name}` scopes), periods that start
-- over on their own (`period_start`: the period `used_tokens` counts in),
-- and the once-per-period warning (`warned_at`).
ALTER TABLE token_budget_usage DROP CONSTRAINT IF EXISTS token_budget_usage_scope_check;
ALTER TABLE token_budget_usage
    ADD CONSTRAINT token_budget_usage_scope_check
        CHECK (scope = 'org' OR scope LIKE 'agent:%' OR scope LIKE 'unit:_%'),
    ADD COLUMN period_start timestamptz,
    ADD COLUMN warned_at    timestamptz;

-- The warning fraction a settlement checks (0 = none).
ALTER TABLE budget_reservations
    ADD COLUMN warn_at double precision NOT NULL DEFAULT 0;
