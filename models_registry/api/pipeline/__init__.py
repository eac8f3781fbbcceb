"""The one pipeline every inference route runs: the skeleton, the call and answer values, the error table, the request record."""
