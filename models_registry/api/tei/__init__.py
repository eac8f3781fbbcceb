"""Text Embeddings Inference's routes: /rerank, /tokenize and /embed_sparse."""
