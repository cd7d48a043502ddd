#!/usr/bin/env python3
"""Write tests/flink/expected/sinks.out: the files Apache Flink's filesystem sink writes for
the INSERTs of tests/flink/sinks/values.sql (json and csv with their options), one section
per sink folder, lines sorted. Compared by tests/flink.rs (`flink::sink_files_are_flinks`).

Needs `pip install apache-flink==2.3.0` and Java 17, like generate.py.
"""

import glob
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate  # noqa: E402  (environment and case-file parsing)


def main():
    generate.setup_environment()
    from pyflink.table import EnvironmentSettings, TableEnvironment

    with open(os.path.join(HERE, "sinks", "values.sql"), encoding="utf-8") as f:
        text = f.read()
    out = tempfile.mkdtemp(prefix="flink-sinks-")
    _, statements = generate.parse_case(text.replace("${OUT}", out))
    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    env.get_config().set("parallelism.default", "1")
    env.get_config().set("table.local-time-zone", "UTC")
    for stmt in statements:
        env.execute_sql(stmt).wait()
    lines = []
    for folder in sorted(os.listdir(out)):
        lines.append("== " + folder)
        rows = []
        for part in glob.glob(os.path.join(out, folder, "**", "*"), recursive=True):
            name = os.path.basename(part)
            if os.path.isfile(part) and not name.startswith((".", "_")):
                with open(part, encoding="utf-8") as f:
                    rows.extend(f.read().splitlines())
        lines.extend(sorted(rows))
    with open(os.path.join(HERE, "expected", "sinks.out"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
