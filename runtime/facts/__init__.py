"""Fact building: trajectories (JSONL, Parquet, Arrow) read, checked and encoded into the columns a compiled
rubric's kernel reads (`fact_batch.FactBatch`)."""
