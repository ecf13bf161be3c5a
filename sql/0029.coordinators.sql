-- depends: 0028.fair_share
-- Every coordinator process on this database, as it last checked in (each maintenance pass):
-- a digest per setting that must agree across hosts, so /readyz can name the one that
-- differs. Only digests: the session key itself never leaves its host. A row counts while
-- expires_at is to come; one stopped cleanly deletes its own, a killed one's stays a day.
CREATE TABLE coordinators (
    id               text PRIMARY KEY,
    host             text NOT NULL,
    pid              integer NOT NULL,
    version          text NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now(),
    last_seen_at     timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    fingerprint      text NOT NULL,
    setting_digests  jsonb NOT NULL
);
CREATE INDEX coordinators_expires_idx ON coordinators (expires_at);
