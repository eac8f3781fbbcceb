"""What each pipeline task accepts: its parameters and inputs as typed shapes, and their 400 messages (pure)."""
