"""oncelog.storage"""
