"""Full-screen Textual UI for fleet; talks only to fleet's public service API."""
