"""Storm's split-sentence bolt (storm.py BasicBolt: anchored emits, acked after process)."""
import words

words.use_storm()
import storm  # noqa: E402


class SplitSentenceBolt(storm.BasicBolt):
    def process(self, tup):
        for word in tup.values[0].split(" "):
            storm.emit([word])


SplitSentenceBolt().run()
