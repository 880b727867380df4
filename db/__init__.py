"""Database layer: SQLAlchemy models, engine, migrations and typed queries; knows no SSH or UI."""
