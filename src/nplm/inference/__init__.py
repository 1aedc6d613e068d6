"""Using a trained model: prompting and sampling, and its mixture with an n-gram baseline."""
