"""Request and response schemas, one module per blueprint stem; they also feed the OpenAPI."""
