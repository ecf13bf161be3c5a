DROP TABLE queue_bounds;
