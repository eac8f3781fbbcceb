"""The server side: the ASGI front door, the refusals before the body, hosts, the route table, Django's one way in, middleware."""
