DROP TRIGGER tasks_announce_claimable_change ON tasks;
DROP TRIGGER tasks_announce_new_claimable ON tasks;
DROP FUNCTION chunkwise_announce_new_claimable();
DROP FUNCTION chunkwise_announce_claimable();
