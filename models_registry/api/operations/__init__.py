"""What operators and load balancers poll: /health, /ready, /metrics and where models are loaded."""
