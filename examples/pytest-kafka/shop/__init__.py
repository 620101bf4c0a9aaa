"""A small shop's Kafka code: orders published by a producer (confluent-kafka), totals read by an asyncio consumer
(aiokafka), and a transactional copier (confluent-kafka) that turns orders into invoices exactly once."""
