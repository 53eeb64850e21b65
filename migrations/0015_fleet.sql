-- A fleet of engine nodes on one company (issue 20).
--
-- leases: who holds what. One row per resource, never deleted:
--   `node:{id}`   a node's presence (meta: roles, labels, version, api),
--   `seat:{handle}` the one node that runs a seat,
--   `duty:{name}` the one node that runs a company-wide duty.
-- `owner` is a process incarnation (`{node id}:{random}`), so a restarted
-- node never renews its predecessor's hold. `epoch` is the fencing token:
-- it grows on every change of holder and on a re-acquire after a lapse,
-- never on a renewal; a release expires the row in place (owner '') so
-- the counter is never reset. Expiry is judged by the database's clock.
CREATE TABLE leases (
    resource    text PRIMARY KEY,
    owner       text        NOT NULL,
    epoch       bigint      NOT NULL,
    expires_at  timestamptz NOT NULL,
    preferred   text        NOT NULL DEFAULT '',
    meta        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    renewed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX leases_owner_idx ON leases (owner);

-- turn_completions: the triggers (inbox event ids) a seat already worked.
-- Read before a turn, written after it; a redelivered trigger found here
-- is acknowledged without a turn. Not fenced: the turn happened.
CREATE TABLE turn_completions (
    seat         text        NOT NULL,
    trigger_id   uuid        NOT NULL,
    task_id      text        NOT NULL,
    turn_id      uuid,
    outcome      text        NOT NULL,
    node         text        NOT NULL DEFAULT '',
    owner_epoch  bigint      NOT NULL DEFAULT 0,
    completed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (seat, trigger_id)
);
CREATE INDEX turn_completions_completed_at_idx ON turn_completions (completed_at);
CREATE INDEX turn_completions_task_idx ON turn_completions (task_id);

-- turn_journal: the effect journal of running turns. Every model answer
-- and every tool call (started, then its result) is appended before the
-- turn moves on, keyed by the work (`task_key`: the trigger's inbox event
-- id) and the step, and only while the
-- writer's seat lease (resource, owner, epoch) still holds. A turn that
-- restarts on another node reads it back: recorded answers are not asked
-- again, recorded tool results are not run again.
CREATE TABLE turn_journal (
    task_key    text        NOT NULL,
    task_id     text        NOT NULL,
    step        integer     NOT NULL,
    kind        text        NOT NULL,
    seat        text        NOT NULL,
    turn_id     uuid        NOT NULL,
    node        text        NOT NULL DEFAULT '',
    owner_epoch bigint      NOT NULL DEFAULT 0,
    payload     jsonb       NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_key, step, kind)
);
CREATE INDEX turn_journal_recorded_at_idx ON turn_journal (recorded_at);
CREATE INDEX turn_journal_task_idx ON turn_journal (task_id);
