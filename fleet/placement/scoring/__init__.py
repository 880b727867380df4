"""Ranking policies for placement: built-in ones and users' own `module:function` rules."""
