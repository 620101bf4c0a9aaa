"""oncelog.client"""
