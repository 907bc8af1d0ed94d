"""What a recipe is: its sections as pydantic models, YAML with line numbers, the shipped recipes and presets."""
