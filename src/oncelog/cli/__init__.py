"""oncelog.cli"""
