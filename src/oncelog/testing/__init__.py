"""oncelog.testing"""
