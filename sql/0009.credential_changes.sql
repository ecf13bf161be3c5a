-- depends: 0008.queue_bounds
-- Coordinators remember whom a token belongs to (CHUNKWISE_AUTH_CACHE_SECONDS), so a request
-- need not ask the database. Any change to tokens or users, a revocation or a change of role
-- above all, tells every coordinator process to forget what it remembers, the moment it
-- commits. Inserts need no word: only tokens that exist are remembered.
CREATE FUNCTION chunkwise_announce_credentials_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chunkwise_credentials_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER api_tokens_announce_change
    AFTER UPDATE OR DELETE OR TRUNCATE ON api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_announce_credentials_change();

CREATE TRIGGER users_announce_change
    AFTER UPDATE OR DELETE OR TRUNCATE ON users
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_announce_credentials_change();
