"""The peer bench (make bench-peers): Chunkwise beside pgbench, Celery and Procrastinate."""
