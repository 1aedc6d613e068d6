"""Text -> tokens -> vocabulary -> id streams -> context windows -> batches."""
