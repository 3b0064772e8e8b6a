"""Measuring the methods: faithfulness with its controls, the tables, the SAE comparison and the concept features."""
