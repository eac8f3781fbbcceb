"""The HTTP side: views, OpenAI routes, payloads, auth, the error table, the API's description."""
