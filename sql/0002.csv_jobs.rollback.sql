DROP TABLE chunk_summaries;
