"""oncelog.coordinator.transaction"""
