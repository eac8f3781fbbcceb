"""Images and audio: the typed media item, its envelope read in the web, its decoding in the worker."""
