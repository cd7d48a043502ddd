#!/usr/bin/env python3
"""Generate the expected results of the Flink differential suite with real Apache Flink.

For every case file tests/flink/cases/<name>.sql this runs the case's statements in
Apache Flink (PyFlink, local mini-cluster, parallelism 1) in the modes named by the
case's `-- modes:` header (default: batch then streaming) and writes
tests/flink/expected/<name>.out. The formats are described in tests/flink/README.md.

Usage:
    python3 tests/flink/generate.py            # regenerate every case
    python3 tests/flink/generate.py a b        # regenerate cases a and b only
    python3 tests/flink/generate.py --check    # regenerate into memory, fail if any differs

Needs `pip install apache-flink==2.3.0` and a Java 17 JDK (JAVA_HOME is found from
`java` on PATH when unset).
"""

import decimal
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")
EXPECTED = os.path.join(HERE, "expected")
DATA = os.path.join(HERE, "data")

MODES = ("batch", "streaming")
# A query that has not finished after this long is a broken case (e.g. an unbounded
# source): its job is cancelled and generation stops.
QUERY_TIMEOUT_S = 120


# --------------------------------------------------------------------------- environment

def setup_environment():
    """Pin everything that could make Flink's output depend on the machine."""
    if not os.environ.get("JAVA_HOME"):
        java = shutil.which("java")
        if java is None:
            sys.exit("generate.py: no `java` on PATH and JAVA_HOME unset (Java 17 needed)")
        # .../jvm/java-17-openjdk-amd64/bin/java -> .../jvm/java-17-openjdk-amd64
        os.environ["JAVA_HOME"] = os.path.dirname(os.path.dirname(os.path.realpath(java)))
    os.environ["TZ"] = "UTC"
    time.tzset()
    os.environ["LC_ALL"] = "C.UTF-8"
    # Read by PyFlink's gateway launcher: JVM default zone and locale.
    os.environ["JVM_ARGS"] = " ".join(
        [os.environ.get("JVM_ARGS", ""),
         "-Duser.timezone=UTC -Duser.language=en -Duser.country=US -Dfile.encoding=UTF-8"]
    ).strip()


# --------------------------------------------------------------------------- case files

def parse_case(text):
    """Returns (header dict, [statement text]) of a case file.

    Header: the `-- key: value` comment lines before the first statement line.
    Statements: end with `;` at the end of a line. Whole-line `--` comments are dropped.
    """
    header = {}
    statements = []
    current = []
    in_header = True
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if stripped.startswith("--"):
            if in_header:
                m = re.match(r"--\s*([A-Za-z_-]+)\s*:\s*(.*)$", stripped)
                if m:
                    header[m.group(1).lower()] = m.group(2).strip()
            continue
        if not stripped:
            if current:
                current.append("")
            continue
        in_header = False
        if stripped.endswith(";"):
            current.append(line[: line.rfind(";")])
            stmt = "\n".join(current).strip()
            if stmt:
                statements.append(stmt)
            current = []
        else:
            current.append(line)
    if "\n".join(current).strip():
        raise ValueError("the last statement does not end with ';' at the end of a line")
    return header, statements


def one_line(stmt):
    return " ".join(stmt.split())


def is_query(stmt):
    first = re.match(r"\s*\(*\s*([A-Za-z]+)", stmt)
    return bool(first) and first.group(1).upper() in ("SELECT", "WITH")


def top_level_order_by(stmt):
    """True when the statement has ORDER BY outside any parentheses."""
    depth = 0
    out = []
    i = 0
    n = len(stmt)
    while i < n:
        c = stmt[i]
        if c in "'\"`":
            j = i + 1
            while j < n:
                if stmt[j] == c:
                    if j + 1 < n and stmt[j + 1] == c:  # doubled quote
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
            out.append(" ")
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0:
            out.append(c)
        i += 1
    return re.search(r"\bORDER\s+BY\b", "".join(out), re.IGNORECASE) is not None


# --------------------------------------------------------------------------- values

def escape(s):
    return (s.replace("\\", "\\\\").replace("|", "\\|")
            .replace("\n", "\\n").replace("\r", "\\r"))


class TypeDesc:
    """What formatting needs of a Flink LogicalType (read once per query through Py4J)."""

    def __init__(self, j_type):
        self.root = j_type.getTypeRoot().name()
        self.precision = None
        self.scale = None
        if self.root in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE",
                         "TIMESTAMP_WITH_TIME_ZONE", "TIME_WITHOUT_TIME_ZONE"):
            self.precision = j_type.getPrecision()
        if self.root == "DECIMAL":
            self.precision = j_type.getPrecision()
            self.scale = j_type.getScale()
        self.children = [TypeDesc(c) for c in j_type.getChildren()]


def fraction(nanos, digits):
    return ("%09d" % nanos)[:digits]


def fmt_timestamp(year, month, day, hour, minute, second, nano, precision):
    digits = max(3, precision)
    return "%04d-%02d-%02d %02d:%02d:%02d.%s" % (
        year, month, day, hour, minute, second, fraction(nano, digits))


def java_class(v):
    return v.getClass().getName()


def fmt(t, v, jvm, nested=False):
    """Canonical text of the Java value v (already converted by Py4J when primitive)."""
    if v is None:
        return "NULL"
    r = t.root
    if r == "BOOLEAN":
        return "TRUE" if v else "FALSE"
    if r in ("TINYINT", "SMALLINT", "INTEGER", "BIGINT"):
        return str(int(v))
    if r == "DECIMAL":
        d = v if isinstance(v, decimal.Decimal) else decimal.Decimal(v.toPlainString())
        with decimal.localcontext() as ctx:
            ctx.prec = 100
            d = d.quantize(decimal.Decimal(1).scaleb(-t.scale))
        return format(d, "f")
    if r == "DOUBLE":
        return repr(float(v))
    if r == "FLOAT":
        # The shortest decimal that reads back as the same 32-bit float, in Python's
        # repr style ('0.1', not the widened double's '0.10000000149011612').
        import numpy
        return repr(float(str(numpy.float32(v))))
    if r in ("CHAR", "VARCHAR"):
        return escape(str(v))
    if r in ("BINARY", "VARBINARY"):
        return bytes(v).hex()
    if r == "DATE":
        return "%04d-%02d-%02d" % (v.getYear(), v.getMonthValue(), v.getDayOfMonth())
    if r == "TIME_WITHOUT_TIME_ZONE":
        text = "%02d:%02d:%02d" % (v.getHour(), v.getMinute(), v.getSecond())
        nano = v.getNano()
        if nano:
            digits = 3 if nano % 1_000_000 == 0 else 6 if nano % 1000 == 0 else 9
            text += "." + fraction(nano, digits)
        return text
    if r in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE",
             "TIMESTAMP_WITH_TIME_ZONE"):
        cls = java_class(v)
        if cls == "java.time.Instant":
            v = v.atOffset(jvm.java.time.ZoneOffset.UTC).toLocalDateTime()
        elif cls in ("java.time.OffsetDateTime", "java.time.ZonedDateTime"):
            v = v.withOffsetSameInstant(jvm.java.time.ZoneOffset.UTC).toLocalDateTime() \
                if cls == "java.time.OffsetDateTime" else \
                v.withZoneSameInstant(jvm.java.time.ZoneOffset.UTC).toLocalDateTime()
        elif cls == "java.sql.Timestamp":
            v = v.toLocalDateTime()
        return fmt_timestamp(v.getYear(), v.getMonthValue(), v.getDayOfMonth(), v.getHour(),
                             v.getMinute(), v.getSecond(), v.getNano(), t.precision)
    if r == "ARRAY":
        return "[" + ", ".join(fmt(t.children[0], e, jvm, True) for e in v) + "]"
    if r in ("MAP", "MULTISET"):
        key_t = t.children[0]
        val_t = t.children[1] if r == "MAP" else None
        entries = []
        for k in list(v.keySet()):
            kv = v.get(k)
            entries.append((fmt(key_t, k, jvm, True),
                            fmt(val_t, kv, jvm, True) if val_t else str(int(kv))))
        entries.sort()
        return "{" + ", ".join("%s=%s" % e for e in entries) + "}"
    if r in ("ROW", "STRUCTURED_TYPE"):
        arity = v.getArity()
        return "(" + ", ".join(fmt(t.children[i], v.getField(i), jvm, True)
                               for i in range(arity)) + ")"
    # Anything else (intervals, RAW, ...): Java's toString().
    return escape(v.toString()) if not isinstance(v, (int, float, str)) else escape(str(v))


# --------------------------------------------------------------------------- running

def java_error_line(err):
    """First line of the Flink (Java) message of a Py4J error.

    Planning errors: the outermost exception's message. Job failures (the exception
    chain passes through a JobExecutionException): the innermost cause's message.
    """
    j = getattr(err, "java_exception", None)
    if j is None:
        msg = str(err)
    else:
        chain = []
        while j is not None and len(chain) < 50:
            chain.append(j)
            j = j.getCause()
        classes = [java_class(e) for e in chain]
        if any(c.endswith("JobExecutionException") for c in classes):
            e = chain[-1]
        else:
            e = chain[0]
        msg = e.getMessage()
        if msg is None or not msg.strip():
            msg = java_class(e)
    for line in msg.splitlines():
        if line.strip():
            return line.strip()
    return msg.strip()


def column_type(j_column):
    t = j_column.getDataType().toString()
    return re.sub(r"\s*\*(ROWTIME|PROCTIME)\*", "", t)


class Runner:
    def __init__(self):
        from pyflink.table import EnvironmentSettings, TableEnvironment
        from pyflink.java_gateway import get_gateway
        import py4j.java_gateway
        import py4j.protocol

        self.EnvironmentSettings = EnvironmentSettings
        self.TableEnvironment = TableEnvironment
        self.jvm = get_gateway().jvm
        # PyFlink turns some Java exceptions into Python ones that keep only the stack
        # trace text; keep Py4J's own errors instead, which carry the Java exception.
        py4j.java_gateway.get_return_value = py4j.protocol.get_return_value
        from py4j.protocol import Py4JJavaError
        self.Py4JJavaError = Py4JJavaError

    def new_env(self, mode):
        settings = (self.EnvironmentSettings.in_batch_mode() if mode == "batch"
                    else self.EnvironmentSettings.in_streaming_mode())
        env = self.TableEnvironment.create(settings)
        config = env.get_config()
        config.set("parallelism.default", "1")
        config.set("table.local-time-zone", "UTC")
        return env

    def run_query(self, env, stmt, mode):
        """Returns the lines of one block (after the `-- sql:` line)."""
        try:
            table = env.sql_query(stmt)
            j_schema = table._j_table.getResolvedSchema()
            j_columns = list(j_schema.getColumns())
            columns = ["%s %s" % (c.getName(), column_type(c)) for c in j_columns]
            types = [TypeDesc(c.getDataType().getLogicalType()) for c in j_columns]
            result = table.execute()
        except self.Py4JJavaError as e:
            return ["-- error: " + java_error_line(e)]

        j_result = result._j_table_result
        timer = threading.Timer(QUERY_TIMEOUT_S, lambda: self._cancel(j_result))
        timer.start()
        kinds = []
        rows = []
        try:
            it = j_result.collect()
            try:
                while it.hasNext():
                    j_row = it.next()
                    kinds.append(j_row.getKind().shortString())
                    rows.append(" | ".join(fmt(t, j_row.getField(i), self.jvm)
                                           for i, t in enumerate(types)))
            finally:
                it.close()
        except self.Py4JJavaError as e:
            if getattr(self, "_timed_out", False):
                raise RuntimeError("query did not finish within %ds: %s"
                                   % (QUERY_TIMEOUT_S, one_line(stmt)))
            return ["-- error: " + java_error_line(e)]
        finally:
            timer.cancel()

        updating = any(k != "+I" for k in kinds)
        ordered = top_level_order_by(stmt) and not updating
        # Materialize the changelog.
        live = []
        if not updating:
            live = rows
        else:
            counts = Counter()
            order = []
            for kind, row in zip(kinds, rows):
                if kind in ("+I", "+U"):
                    counts[row] += 1
                    order.append(row)
                else:
                    if counts[row] <= 0:
                        raise RuntimeError("%s retracts a row never inserted: %s (%s)"
                                           % (kind, row, one_line(stmt)))
                    counts[row] -= 1
            live = list(counts.elements())
        if not ordered:
            live = sorted(live)
        for row in live:
            if row == "" or row.startswith("-- ") or row.startswith("== "):
                raise RuntimeError("row %r would be misread in the expected file; add a "
                                   "column to the query: %s" % (row, one_line(stmt)))
        lines = ["-- columns: " + ", ".join(columns),
                 "-- changelog: " + ("updating" if updating else "append")]
        if ordered:
            lines.append("-- ordered")
        lines.extend(live)
        return lines

    def _cancel(self, j_result):
        self._timed_out = True
        try:
            client = j_result.getJobClient()
            if client.isPresent():
                client.get().cancel()
        except Exception:  # noqa: BLE001 - best effort
            pass

    def run_case(self, name):
        path = os.path.join(CASES, name + ".sql")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        header, statements = parse_case(text.replace("${DATA}", DATA))
        # The `-- sql:` line shows the case's own text, placeholder included.
        _, raw_statements = parse_case(text)
        modes = header.get("modes", "batch streaming").split()
        for m in modes:
            if m not in MODES:
                raise ValueError("%s: unknown mode %r" % (name, m))
        modes = [m for m in MODES if m in modes]
        queries = [i for i, s in enumerate(statements) if is_query(s)]
        blocks = {}  # (query number, mode) -> lines
        # `-- set: key=value, key=value`: session options of the case.
        options = [kv.split("=", 1) for kv in header.get("set", "").split(",") if kv.strip()]
        for mode in modes:
            env = self.new_env(mode)
            for key, value in options:
                env.get_config().set(key.strip(), value.strip())
            number = 0
            for i, stmt in enumerate(statements):
                if i not in queries:
                    try:
                        env.execute_sql(stmt).wait()
                    except self.Py4JJavaError as e:
                        raise RuntimeError("%s (%s): statement failed: %s\n%s"
                                           % (name, mode, java_error_line(e), stmt)) from None
                    continue
                number += 1
                blocks[(number, mode)] = self.run_query(env, stmt, mode)
        out = []
        for number, i in enumerate(queries, start=1):
            for mode in modes:
                out.append("== query %d (%s)" % (number, mode))
                out.append("-- sql: " + one_line(raw_statements[i]))
                out.extend(blocks[(number, mode)])
                out.append("")
        return "\n".join(out)


def main(argv):
    check = "--check" in argv
    names = [a for a in argv if not a.startswith("--")]
    all_names = sorted(f[:-4] for f in os.listdir(CASES) if f.endswith(".sql"))
    for n in names:
        if n not in all_names:
            sys.exit("generate.py: no case %s (tests/flink/cases/%s.sql)" % (n, n))
    names = names or all_names

    setup_environment()
    start = time.time()
    runner = Runner()
    os.makedirs(EXPECTED, exist_ok=True)
    differing = []
    for name in names:
        t0 = time.time()
        text = runner.run_case(name)
        target = os.path.join(EXPECTED, name + ".out")
        if check:
            old = open(target, encoding="utf-8").read() if os.path.exists(target) else None
            if old != text:
                differing.append(name)
        else:
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
        errors = text.count("\n-- error: ")
        print("%-28s %5.1fs%s" % (name, time.time() - t0,
                                  "  (%d error block(s))" % errors if errors else ""),
              flush=True)
    print("%d case(s) in %.1fs" % (len(names), time.time() - start))
    if check and differing:
        print("differ from tests/flink/expected: " + " ".join(differing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
