"""The OpenAPI 3.1 document of the API, and each model's own paths in it."""
