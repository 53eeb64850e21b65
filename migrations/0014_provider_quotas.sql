-- Provider quotas: one row per model provider, the schedule every process
-- reserves its calls from (a generic cell rate algorithm). `request_tat` is
-- the earliest start of the next request; `token_tat` is when the token
-- bucket would be full again. A reservation reads and moves both in one
-- statement (see crewlet_core::quota).
CREATE TABLE provider_quotas (
    quota_key   text PRIMARY KEY,
    request_tat timestamptz NOT NULL,
    token_tat   timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
