"""Independent references the real engine is tested against."""
