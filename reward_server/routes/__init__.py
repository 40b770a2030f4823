"""One router per resource: meta (health, metrics, verifier list), verify, rewards."""
