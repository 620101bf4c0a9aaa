"""oncelog.protocol"""
