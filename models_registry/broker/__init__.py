"""The channel layer, admission across workers, the wire messages and the view-side hand-off."""
