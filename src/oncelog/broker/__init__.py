"""oncelog.broker"""
