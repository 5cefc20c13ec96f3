"""The only code that talks to Kafka: broker providers, producers, consumers, dead letters, services."""
