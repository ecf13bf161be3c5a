ALTER TABLE jobs DROP COLUMN not_before;
