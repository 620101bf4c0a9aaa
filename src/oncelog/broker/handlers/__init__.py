"""One module per Kafka API. Each exposes API_KEY, MIN_VERSION, MAX_VERSION and handle(broker, ctx, request)."""
