"""What the API reads: the inline read models, the catch-up views, the log and its history."""
