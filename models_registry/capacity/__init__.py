"""What a worker can hold and run: its memory budget, batch memory fits, placement plans and the default process layout."""
