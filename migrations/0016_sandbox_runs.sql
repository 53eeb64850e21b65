-- Sandbox runs: the coding-agent runs seats start with `run_sandbox`.
--
-- sandbox_runs: one row per run. A run outlives the turn that started it
-- (the turn parks its seat until the run ends) and the engine process (a
-- restart finds the running ones and waits for them again), so the row
-- holds everything needed to pick it up: the seat, the turn and tool call
-- it answers, the trigger to resume, the box and run ids, and where it
-- stands. `(seat, turn_id, call_id)` is unique: a call that runs again
-- after a restart finds its run instead of starting a second one.
-- Status changes are compare-and-set (`UPDATE ... WHERE status = ANY(..)`),
-- so of two engines that see the same run finish, one claims it.
CREATE TABLE sandbox_runs (
    id            uuid        PRIMARY KEY,
    seat          text        NOT NULL,
    task_id       text        NOT NULL,
    turn_id       uuid        NOT NULL,
    call_id       text        NOT NULL,
    -- The inbox event of the turn's trigger, to run the turn again.
    trigger_event jsonb       NOT NULL,
    -- `source|channel|thread` where a question is asked and answered.
    conversation  text,
    -- `local` or `e2b`; `box_id` is empty once the box is gone.
    backend       text        NOT NULL,
    box_id        text        NOT NULL DEFAULT '',
    run_id        text        NOT NULL DEFAULT '',
    coding_agent  text        NOT NULL,
    status        text        NOT NULL CHECK (status IN
                      ('running', 'awaiting_answer', 'answered', 'completed', 'failed')),
    -- `{"text": ..., "audience": ...}` when the agent asked.
    question      jsonb,
    answer        text,
    -- Findings, transcript, exit code, usage.
    result        jsonb,
    -- When the box was paused for a question (the pause TTL counts from it).
    paused_at     timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (seat, turn_id, call_id)
);
-- The runs to wait for again at start, and the closed ones to prune.
CREATE INDEX sandbox_runs_status_idx ON sandbox_runs (status);
-- An answer in a conversation finds the run that asked.
CREATE INDEX sandbox_runs_awaiting_idx ON sandbox_runs (seat, conversation)
    WHERE status = 'awaiting_answer';
