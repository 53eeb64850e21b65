-- Revision ids on the HTTP API are uuids (the contract scripts written for
-- the original engine rely on: `revision_id` and `parent_revision_id` are
-- uuid strings, `If-Match` and `/config/revisions/{id}` take them). The
-- bigint identity stays the primary key and the order of the history; the
-- uuid is a second, unique name for the same row, minted by the database.
--
-- Existing rows get one each from the default (ADD COLUMN with a volatile
-- default rewrites the table, which for this table is a handful of rows).
ALTER TABLE company_config
    ADD COLUMN revision_uuid uuid NOT NULL DEFAULT gen_random_uuid();
CREATE UNIQUE INDEX company_config_by_uuid ON company_config (revision_uuid);
