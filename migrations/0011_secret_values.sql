-- The secret store: one row per `${NAME}`, its value sealed with the
-- bootstrap keyring (AES-256-GCM, the name bound in as associated data).
-- Values are never stored in the clear: `value` is the envelope
-- `enc:v1:<key_id>:<base64 of nonce and ciphertext>`.
CREATE TABLE secret_values (
    name       text PRIMARY KEY,
    value      text NOT NULL,
    key_id     text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL DEFAULT '',
    source     text NOT NULL DEFAULT ''
);
