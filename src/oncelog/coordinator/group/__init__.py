"""oncelog.coordinator.group"""
