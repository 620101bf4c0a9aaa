"""Security as the broker runs it: who a client is, what it may do, how fast it may go (the decisions and their
records are ``oncelog.security``'s).

- ``authentication.py``: each listener's TLS and SASL, the credentials they check, certificates renewed in place;
  ``oauth.py``: the OAUTHBEARER keys (JWKS) tokens are checked against;
- ``authorization.py``: which API checks which operation on which resource (Kafka's table), the audit log;
- ``quotas.py``: client quotas (produce and fetch byte rates, request percentage) and the throttle times.
"""
