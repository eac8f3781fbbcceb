"""Per-token policies: rate limits and quotas, priority classes, the response cache."""
