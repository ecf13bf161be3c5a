-- depends: 0026.lease_tokens
-- The dashboard's sessions live here, not in the cookie: the cookie names one by a random id,
-- stored only as its SHA-256, so signing out (deleting the row) ends the session on every
-- coordinator at once, and a copy of the cookie taken before then opens nothing.
-- Revoking the token a session was signed in with ends it too: the lookup joins the live
-- token, and credentials.revoke_token deletes its rows. Expired rows go in maintenance.
CREATE TABLE ui_sessions (
    id_sha256   text PRIMARY KEY,
    token_id    bigint NOT NULL REFERENCES api_tokens (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

CREATE INDEX ui_sessions_token_id ON ui_sessions (token_id);
CREATE INDEX ui_sessions_expires_at ON ui_sessions (expires_at);
