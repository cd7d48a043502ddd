#!/usr/bin/env python3
"""Write tests/flink/expected/sinks.out: the files Apache Flink's filesystem sink writes for
the statements of each tests/flink/sinks/<name>.sql, run in batch mode (`${OUT}` is a
fresh folder per file): one section `== <name>/<folder>` per folder holding files, its
lines sorted. Compared by tests/flink.rs (`flink::sink_files_are_flinks`).

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

    lines = []
    for script in sorted(os.listdir(os.path.join(HERE, "sinks"))):
        if not script.endswith(".sql"):
            continue
        name = script[: -len(".sql")]
        with open(os.path.join(HERE, "sinks", script), encoding="utf-8") as f:
            text = f.read()
        out = tempfile.mkdtemp(prefix="flink-sinks-")
        _, statements = generate.parse_case(text.replace("${OUT}", out))
        env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
        env.get_config().set("parallelism.default", "1")
        env.get_config().set("table.local-time-zone", "UTC")
        for stmt in statements:
            env.execute_sql(stmt).wait()
        folders = {}
        for part in glob.glob(os.path.join(out, "**", "*"), recursive=True):
            rel = os.path.relpath(part, out)
            if os.path.isfile(part) and not any(p.startswith((".", "_")) for p in rel.split(os.sep)):
                with open(part, encoding="utf-8") as f:
                    folders.setdefault(os.path.dirname(rel), []).extend(f.read().splitlines())
        for folder in sorted(folders):
            lines.append("== %s/%s" % (name, folder))
            lines.extend(sorted(folders[folder]))
    with open(os.path.join(HERE, "expected", "sinks.out"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
