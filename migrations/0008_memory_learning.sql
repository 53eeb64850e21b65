-- What the learning loop needs from the memory tables (crewlet-memory's
-- repositories).

-- An episode names the task its turn worked on and the synthesized skills it
-- loaded, so skill use can be tied back to outcomes.
ALTER TABLE episodes ADD COLUMN task_id text;
ALTER TABLE episodes ADD COLUMN skills_used jsonb NOT NULL DEFAULT '[]'::jsonb;

-- Episode ids are turn ids: `contains` and `compact` look rows up by id
-- within one agent, which the (ended_at, id) primary key cannot serve.
CREATE INDEX episodes_by_id ON episodes (agent_handle, id);

-- The diary's exact-duplicate guard compares content within one agent; an
-- index on the digest keeps it one probe however long the content is (a
-- btree on the text itself would refuse entries over ~2.7 kB).
CREATE INDEX agent_diary_content ON agent_diary (agent_id, md5(content));
