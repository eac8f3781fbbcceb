"""OpenAI-compatible protocol pieces: tool calls and their schemas."""
