-- What agents remember (SPEC §11). Schema only: the repositories live in
-- crewlet-memory. Vector columns use the embedding width fixed at the first
-- migration; similarity search is cosine through HNSW indexes.

-- Private agent memory.
CREATE TABLE agent_diary (
    id         uuid        PRIMARY KEY,
    agent_id   uuid        NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('diary_long', 'diary_short')),
    content    text        NOT NULL,
    embedding  vector({{embedding_dim}}),
    ttl_until  timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_diary_embedding ON agent_diary USING hnsw (embedding vector_cosine_ops);
CREATE INDEX agent_diary_recent ON agent_diary (agent_id, created_at DESC);
CREATE INDEX agent_diary_expiry ON agent_diary (ttl_until) WHERE ttl_until IS NOT NULL;

-- One row per completed turn, raw or compacted; partitioned by ended_at
-- (TimescaleDB: hypertable with 7-day chunks).
DO $$
BEGIN
    EXECUTE format($ddl$
        CREATE TABLE episodes (
            id             uuid        NOT NULL,
            agent_handle   text        NOT NULL,
            agent_id       uuid,
            turn_id        text,
            task_summary   text        NOT NULL DEFAULT '',
            plan_summary   text        NOT NULL DEFAULT '',
            tool_sequence  jsonb       NOT NULL DEFAULT '[]'::jsonb,
            review_outcome text,
            started_at     timestamptz NOT NULL,
            ended_at       timestamptz NOT NULL,
            duration_ms    bigint      NOT NULL DEFAULT 0,
            embedding      vector({{embedding_dim}}),
            kind           text        NOT NULL DEFAULT 'raw' CHECK (kind IN ('raw', 'compacted')),
            work_key       text,
            created_at     timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (ended_at, id)
        ) %s
    $ddl$, crewlet_partition_clause('ended_at'));
END
$$;
SELECT crewlet_finish_time_table('episodes', 'ended_at');
CREATE INDEX episodes_embedding ON episodes USING hnsw (embedding vector_cosine_ops);
CREATE INDEX episodes_recent ON episodes (agent_handle, ended_at DESC);
CREATE INDEX episodes_by_kind ON episodes (agent_handle, kind, ended_at);
CREATE INDEX episodes_by_work_key ON episodes (agent_handle, work_key) WHERE work_key IS NOT NULL;

-- Auto-drafted skills and their history (10 versions kept by the writer).
CREATE TABLE synthesized_skills (
    id                 uuid        PRIMARY KEY,
    agent_handle       text        NOT NULL,
    name               text        NOT NULL,
    description        text        NOT NULL DEFAULT '',
    body               text        NOT NULL,
    tool_sequence      jsonb       NOT NULL DEFAULT '[]'::jsonb,
    state              text        NOT NULL DEFAULT 'active'
                                   CHECK (state IN ('active', 'stale', 'archived')),
    version            integer     NOT NULL DEFAULT 1,
    embedding          vector({{embedding_dim}}),
    use_count          integer     NOT NULL DEFAULT 0,
    last_used_at       timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (agent_handle, name)
);
CREATE INDEX synthesized_skills_embedding ON synthesized_skills USING hnsw (embedding vector_cosine_ops);
CREATE INDEX synthesized_skills_by_state ON synthesized_skills (agent_handle, state);

CREATE TABLE synthesized_skill_versions (
    skill_id    uuid        NOT NULL REFERENCES synthesized_skills (id) ON DELETE CASCADE,
    version     integer     NOT NULL,
    description text        NOT NULL DEFAULT '',
    body        text        NOT NULL,
    change_note text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (skill_id, version)
);

-- What an agent (observer) knows of a person (subject) on a platform.
CREATE TABLE counterparty_profiles (
    observer          text        NOT NULL,
    subject           text        NOT NULL,
    platform          text        NOT NULL,
    display_name      text,
    summary           text        NOT NULL DEFAULT '',
    traits            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    embedding         vector({{embedding_dim}}),
    interaction_count integer     NOT NULL DEFAULT 0,
    last_seen_at      timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (observer, subject, platform)
);
CREATE INDEX counterparty_profiles_embedding ON counterparty_profiles USING hnsw (embedding vector_cosine_ops);

-- First-turn onboarding done (chain_hash: the manager chain it was done for).
CREATE TABLE agent_onboarding_markers (
    agent_id     uuid        PRIMARY KEY,
    chain_hash   text        NOT NULL,
    onboarded_at timestamptz NOT NULL DEFAULT now()
);
