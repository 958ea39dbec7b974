"""Case worker scripts, each run by path in a fresh process with one implementation's python."""
