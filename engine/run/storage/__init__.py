"""The run's store: SQLite, written by one writer and never lost to a full disk (what it
holds in memory until committed), its rows and the typed events read back."""
