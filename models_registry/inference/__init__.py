"""The only code that imports torch and transformers: loading, packing, the trace, task runs."""
