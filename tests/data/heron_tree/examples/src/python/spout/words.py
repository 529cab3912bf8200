"""What the example spouts emit: ``examples.words`` words per task (100 unless the
config says), cycling through WORDS."""
WORDS = ["apple", "banana", "cherry", "damson", "elder"]


def how_many(config):
    return int(config.get("examples.words", 100))
