DROP TABLE workloads;
DROP FUNCTION chunkwise_announce_workloads_change();
