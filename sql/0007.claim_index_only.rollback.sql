CREATE INDEX tasks_unfinished_idx ON tasks (workload) WHERE status IN ('pending', 'leased');
