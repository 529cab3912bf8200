from streamparse import Grouping, JavaBolt, Topology

from dsl_components import Source


class BadJava(Topology):
    source = Source.spec()
    counter = JavaBolt.spec(full_class_name="com.example.CountBolt", args_list=[],
                            inputs={source["words"]: Grouping.fields("word")}, outputs=["word", "count"])
