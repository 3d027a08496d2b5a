"""The torch-free half of agilerl: the manifest contract."""
