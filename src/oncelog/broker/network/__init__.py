"""The broker's sockets: client connections in, and this broker's connections out to the other brokers.

- ``acceptor.py``: a listener's accept loop and TLS handshakes; ``connection_quotas.py``: Kafka's connection limits
  (which accepted connection is served, delayed or closed);
- ``connection.py``: one client connection (frames in, SASL authentication, handlers called and answered in
  request order);
- ``peer_connections.py``: one connection to each other broker of the cluster, on its inter-broker listener.
"""
