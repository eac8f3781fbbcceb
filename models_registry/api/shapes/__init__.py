"""The API's request and answer shapes (pydantic and TypedDicts) that the protocols validate with and the document shows."""
