-- The diary, hash-partitioned by agent.
--
-- Every diary query names one agent. In one table, the HNSW search of an
-- agent that holds a tenth of the rows walks a graph of everyone's rows
-- and throws away most of what it reaches (near any query the other agents
-- own 95% of the neighbours): at 1,000,000 rows that was a p99 of 90 ms
-- and more. Split 32 ways by agent, the search prunes to one partition, a
-- graph about a thirtieth of the size in which most neighbours are the
-- agent's own (p99 about 10 ms, docs/performance.md). The HNSW build gets
-- cheaper too: 32 small graphs instead of one big one.
--
-- The primary key must hold the partition key, so it becomes (agent_id,
-- id); ids stay UUIDv7 and every statement already names the agent.
ALTER TABLE agent_diary RENAME TO agent_diary_unpartitioned;
ALTER TABLE agent_diary_unpartitioned
    RENAME CONSTRAINT agent_diary_pkey TO agent_diary_unpartitioned_pkey;

CREATE TABLE agent_diary (
    id         uuid        NOT NULL,
    agent_id   uuid        NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('diary_long', 'diary_short')),
    content    text        NOT NULL,
    embedding  vector({{embedding_dim}}),
    ttl_until  timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT agent_diary_pkey PRIMARY KEY (agent_id, id)
) PARTITION BY HASH (agent_id);

DO $$
BEGIN
    FOR i IN 0..31 LOOP
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF agent_diary FOR VALUES WITH (MODULUS 32, REMAINDER %s)',
            'agent_diary_p' || lpad(i::text, 2, '0'), i);
    END LOOP;
END
$$;

INSERT INTO agent_diary (id, agent_id, kind, content, embedding, ttl_until, created_at)
    SELECT id, agent_id, kind, content, embedding, ttl_until, created_at
    FROM agent_diary_unpartitioned;
DROP TABLE agent_diary_unpartitioned;

-- Building an HNSW graph whose working set does not fit in
-- maintenance_work_mem is many times slower; the default (64 MB) holds a
-- graph of only some 30,000 rows of 384 dimensions. Memory is taken as the
-- build needs it, for this transaction only.
SET LOCAL maintenance_work_mem = '512MB';

-- The same four indexes as before (0004, 0008), now one per partition;
-- built after the copy, which is faster than maintaining them row by row.
CREATE INDEX agent_diary_embedding ON agent_diary USING hnsw (embedding vector_cosine_ops);
CREATE INDEX agent_diary_recent ON agent_diary (agent_id, created_at DESC);
CREATE INDEX agent_diary_expiry ON agent_diary (ttl_until) WHERE ttl_until IS NOT NULL;
CREATE INDEX agent_diary_content ON agent_diary (agent_id, md5(content));

-- Fresh partitions have no statistics until autovacuum reaches them; the
-- planner would guess until then (a full scan of a partition for the
-- newest rows of a big agent).
ANALYZE agent_diary;
