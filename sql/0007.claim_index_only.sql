-- depends: 0006.statement_announcements
-- tasks_unfinished_idx (0005) was a trap for the planner. A queue's statistics are always
-- behind (40,000 tasks queued since the last ANALYZE look like none), and then claims and
-- batches of results chose it over tasks_claim_idx and tasks_lease_owner_idx, scanning and
-- sorting every unfinished task: 140 ms claims of 100 in place of 5 ms. Admission counts a
-- workload's pending tasks through tasks_claim_idx and its leased ones through
-- tasks_lease_owner_idx instead, so each kind of row has one index that fits it.
DROP INDEX tasks_unfinished_idx;
