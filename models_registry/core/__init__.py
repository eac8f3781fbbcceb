"""What every package needs: imports nothing of ours and no Django HTTP."""
