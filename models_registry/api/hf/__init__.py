"""The Hugging Face Inference API: POST /models/<name>[/<task>], its bodies, media inputs and TGI's streaming."""
