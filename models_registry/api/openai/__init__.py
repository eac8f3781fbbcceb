"""OpenAI's API: embeddings, models, chat and completions, files, batches and usage."""
