"""The local stack for development and tests: an embedded PostgreSQL, the coordinator and
workers as local processes, sample data, and the demo."""
