"""Metrics, the recent-traffic window and the dashboard."""
