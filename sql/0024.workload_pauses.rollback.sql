DROP TABLE workload_pauses;
