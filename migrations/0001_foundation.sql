-- Extensions and the helpers later migrations use.
--
-- Before any file runs, the migration runner (crates/crewlet-store/src/migrate.rs)
-- creates its own bookkeeping tables `schema_migrations` and `crewlet_settings`
-- and records there, once, the embedding width and the time-partitioning mode
-- ('timescale' or 'native'). `{{embedding_dim}}` in these files is replaced by
-- the stored width; the mode is read by the functions below.

CREATE EXTENSION IF NOT EXISTS vector;

-- 'timescale' (hypertables) or 'native' (range partitions), fixed at first migration.
CREATE FUNCTION crewlet_time_partitioning() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(
        (SELECT value FROM crewlet_settings WHERE key = 'time_partitioning'),
        'native')
$$;

-- What to append to CREATE TABLE for a table partitioned by `time_column`.
CREATE FUNCTION crewlet_partition_clause(time_column text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE crewlet_time_partitioning()
        WHEN 'native' THEN format('PARTITION BY RANGE (%I)', time_column)
        ELSE ''
    END
$$;

-- Finishes a time-partitioned table: a hypertable with 7-day chunks under
-- TimescaleDB; otherwise a DEFAULT partition so an insert never fails for want
-- of a weekly partition (those are created ahead by `ensure_partitions`).
CREATE FUNCTION crewlet_finish_time_table(tbl text, time_column text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF crewlet_time_partitioning() = 'timescale' THEN
        EXECUTE format(
            'SELECT create_hypertable(%L, %L, chunk_time_interval => INTERVAL ''7 days'')',
            tbl, time_column);
    ELSE
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', tbl || '_default', tbl);
    END IF;
END
$$;
