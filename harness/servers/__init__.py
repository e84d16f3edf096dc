"""Server profiles and their lives: launch (SGLang, the sim, any command) or attach, readiness, clean stop."""
