"""Optional speed paths. Each checks once whether it applies and otherwise leaves the plain path
(autograd, torch's public ops) to do the work; a test forces each fallback and gets the same numbers."""
