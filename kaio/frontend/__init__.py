"""Python source -> kernel dialect."""
