"""Tests of the speed-ups: a generic contract over every registered one, then one file each."""
