DROP TABLE workload_buckets;
