"""The `runworker inference` process: intake, the engine, the pure batcher, sizing, heartbeats."""
