"""Batch jobs: OpenAI-style input files run line by line through the same views and workers."""
