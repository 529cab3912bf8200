# a multilang script the DSL names by a path relative to the project's src/
