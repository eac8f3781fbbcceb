"""Snapshots of the database for the hot paths and what each task accepts."""
