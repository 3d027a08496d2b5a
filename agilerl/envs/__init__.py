"""Environment factories: specs in, live (vectorised) environments out."""
