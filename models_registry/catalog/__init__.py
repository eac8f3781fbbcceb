"""Snapshots of the database for the hot paths, worker heartbeats, and what a request costs."""
