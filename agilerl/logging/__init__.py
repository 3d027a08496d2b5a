"""Run directory, metric sinks and the live console display."""
