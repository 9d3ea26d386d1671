"""NetworkX builders that decide who sends to whom."""
