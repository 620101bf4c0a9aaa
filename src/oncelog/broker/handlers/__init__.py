"""oncelog.broker.handlers"""
