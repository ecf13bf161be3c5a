DROP TRIGGER users_announce_change ON users;
DROP TRIGGER api_tokens_announce_change ON api_tokens;
DROP FUNCTION chunkwise_announce_credentials_change();
