"""`make bench`: the in-process ceiling of the demo model and the product under HTTP load."""
