from setuptools import find_packages, setup

setup(
    name="bittern",
    version="0.1.0",
    description="Storm/Heron-style stream processing in Python: one OS process per task, "
                "stream managers over ZeroMQ",
    python_requires=">=3.11",
    packages=find_packages(include=["bittern", "bittern.*", "nimbus", "nimbus.*", "supervisor",
                                    "supervisor.*", "instance", "instance.*", "streammgr", "streammgr.*"]),
    package_data={"bittern": ["defaults.toml", "webui/static/*.js", "webui/static/*.css",  # the web UI (vendored:
                              "webui/static/vendor/*"]},  # scripts/vendor_webui.sh)
    install_requires=[
        "pyzmq>=25",  # the transport: ipc:// inside a container, tcp:// between them
        "msgpack>=1.0",  # frames and tuple values, safe to decode from the network
        "psutil>=5.9",  # process CPU/RSS for metrics and resource limits
        "rich>=13",  # the live terminal UI (bittern top)
    ],
    extras_require={
        # ZooKeeper state manager (cluster mode); PyNaCl: libsodium's sealed boxes, so nimbus hands each
        # supervisor its containers' CURVE secrets encrypted to that supervisor's own (CURVE = X25519) key
        "cluster": ["kazoo>=2.9,<3", "pynacl>=1.5"],
        "metrics": ["prometheus_client>=0.17"],
        # bittern.state.backend = disk: keyed state in an embedded RocksDB (manylinux wheels;
        # bounded memory whatever the state's size: bittern/api/diskstate.py says why not LMDB)
        "disk": ["rocksdict>=0.3.25,<0.4"],
        # SparkSpout (bittern.spark): pyspark 4 and a Java 17 (scripts/setup.sh checks it);
        # pyarrow reads Parquet/ORC schemas at submit time without a JVM
        "spark": ["pyspark>=4.0,<5", "pandas<3", "pyarrow>=14"],
        # spout.spark.master = sc://HOST:PORT or spark://HOST:PORT: the Spark Connect client (gRPC)
        "spark-connect": ["pyspark[connect]>=4.0,<5", "pandas<3", "pyarrow>=14"],
        "parquet": ["pyarrow>=14"],  # ParquetSink (bittern/sinks/parquet.py): no JVM
        "streamparse": ["streamparse>=5,<6"],
        "heron": ["protobuf>=3.20,<4", "cloudpickle>=2.2,<4"],  # + pip install --no-deps heronpy==0.20.5 (docs/COMPAT.md)
        "flux": ["pyyaml>=6"],  # Storm Flux .yaml topologies (bittern/compat/flux.py)
        # hypothesis: the security suite fuzzes every port with generated messages
        "dev": ["pytest>=8", "pytest-timeout>=2", "pytest-xdist>=3.5", "hypothesis>=6", "kazoo>=2.9,<3", "pynacl>=1.5", "prometheus_client>=0.17", "rocksdict>=0.3.25,<0.4", "pyyaml>=6", "pyarrow>=14",
                # the web UI's browser tests drive Debian's chromium (scripts/setup.sh); never `playwright install`
                "playwright>=1.40"],
    },
    entry_points={"console_scripts": ["bittern=bittern.cli.main:main"],
                  # the bittern_run fixture (bittern/testing/pytest_plugin.py); named as its module, so
                  # `pytest -p bittern.testing.pytest_plugin` next to the installed entry point is no clash
                  "pytest11": ["bittern.testing.pytest_plugin=bittern.testing.pytest_plugin"]},
)
